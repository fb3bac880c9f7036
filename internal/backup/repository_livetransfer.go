package backup

import (
	"context"
	"io/fs"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/sandbox"
)

// Live transfers by manifest (issue 36): the source stores the running
// server as a transfer snapshot, and must know which files the snapshot
// holds as they are on disk, so that the live stream that follows sends
// only what changed since.

// WriteLiveTransferSnapshot is WriteTransferSnapshot for a running server:
// seen is told of every regular file the snapshot holds exactly as its
// stat fi describes it (a file reused from the previous backup because its
// stat is the same, or read whole without changing meanwhile). A file
// written to while it was read, an empty file, or a later name of a file
// is not seen. seen may be called from several goroutines at once.
func (s *Service) WriteLiveTransferSnapshot(ctx context.Context, server string, files *sandbox.FS, name string, seen func(rel string, fi fs.FileInfo)) (string, error) {
	if seen == nil {
		seen = func(string, fs.FileInfo) {}
	}
	return s.writeTransferSnapshot(ctx, server, files, name, seen)
}

// seenFiles tells seen of the files its FileHook stored as they are.
type seenFiles struct {
	archive.FileHook
	seen func(rel string, fi fs.FileInfo)
}

func (h seenFiles) Reuse(rel string, fi fs.FileInfo) ([]byte, bool) {
	sum, ok := h.FileHook.Reuse(rel, fi)
	if ok {
		h.seen(rel, fi)
	}
	return sum, ok
}

func (h seenFiles) End(rel string, fi fs.FileInfo, sum []byte) error {
	err := h.FileHook.End(rel, fi, sum)
	if err == nil && fi != nil {
		h.seen(rel, fi)
	}
	return err
}
