package chunkstore

import (
	"context"
	"io"
	"time"
)

// Read-only helpers of the backup view (internal/backupview, issue 35):
// a backup's file is read by the chunks it lies in, never the whole
// stream.

// ReadChunk returns the plain bytes of chunk c of a backup, checked
// against its hash (a *ChunkError when it is missing or damaged).
func (s *Store) ReadChunk(c Chunk) ([]byte, error) { return s.readChunk(c, 0) }

// ChunkReader streams the plain bytes of cs in order, with the Reader's
// bounded read-ahead (coalesced ranged reads, at most readAhead bytes held
// ahead of the caller). The caller closes it.
func (s *Store) ChunkReader(cs []Chunk) io.ReadCloser {
	return s.readerWithin(Manifest{Chunks: cs}, newReadBudget(readAhead))
}

// BackupObject is one backup of a server as the repository lists it.
type BackupObject struct {
	Backup  string
	ModTime time.Time // when its manifest was stored: when the backup ended
}

// Backups lists the backups of server (their manifests' objects), by
// name, without reading the manifests.
func (s *Store) Backups(ctx context.Context, server string) ([]BackupObject, error) {
	objs, err := s.b.List(ctx, "snapshots/"+server+"/")
	if err != nil {
		return nil, err
	}
	var out []BackupObject
	for _, o := range objs {
		if srv, b, ok := manifestObject(o.Name); ok && srv == server {
			out = append(out, BackupObject{Backup: b, ModTime: o.ModTime})
		}
	}
	return out, nil
}

// ReadChunks returns the plain bytes of cs in order, read in the caller's
// goroutine by ranged reads that take neighbours in a pack together (at
// most limit bytes a read), each chunk checked against its hash: a
// sequential reader's next stretch, without the Reader's goroutines.
func (s *Store) ReadChunks(cs []Chunk, limit int64) ([][]byte, error) {
	out := make([][]byte, 0, len(cs))
	for _, g := range s.groups(cs, limit) {
		bs, errs := s.fetch(g)
		for i := range bs {
			if errs[i] != nil {
				return nil, errs[i]
			}
			out = append(out, bs[i])
		}
	}
	return out, nil
}
