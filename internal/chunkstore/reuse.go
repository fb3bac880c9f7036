package chunkstore

import (
	"context"
	"io/fs"
	"slices"
	"syscall"
)

// PrevFile is a file of an earlier backup with its entry's chunks.
type PrevFile struct {
	File
	Chunks []Chunk
	ids    []blobID // Chunks' hashes decoded, when known
	// checked says the chunks are of a backup this Store committed (from
	// its cache, latest.go), so in its index: that commit checked every
	// chunk indexed, only a GC takes blobs out of the index, and it takes
	// none a manifest names, a GC running at that commit was told to keep
	// (gcKeep), or a writer pinned, as LatestIndex pinned these before it
	// saw their manifest still there. A manifest read from the backend
	// may name blobs whose index object was lost: its chunks are checked.
	checked bool
}

// LatestIndex is the file index of the latest backup of server; nil when
// there is none with an index. Manifests are written once, so the newest
// object is the latest backup: only it is read (a manifest is large for a
// server of many files), or taken from memory when this Store committed it
// (latest.go).
//
// Every chunk of that backup is pinned for w, and only then is its
// manifest checked to be still there: a blob a manifest names is removed
// by no GC (see GC), so each reused chunk stays stored.
func (w *Writer) LatestIndex(server string) *FileIndex {
	return w.latestIndex(context.Background(), server)
}

// latestIndex is LatestIndex, its reads under ctx.
func (w *Writer) latestIndex(ctx context.Context, server string) *FileIndex {
	s := w.s
	objs, _ := s.b.List(ctx, "snapshots/"+server+"/")
	slices.SortFunc(objs, func(a, b ObjectInfo) int { return b.ModTime.Compare(a.ModTime) })
	var latest *Manifest
	var ids []blobID
	cached := false
	for _, o := range objs {
		srv, b, ok := manifestObject(o.Name)
		if !ok || srv != server {
			continue
		}
		s.mu.Lock()
		e := s.latest.get(srv, b, o.Size)
		s.mu.Unlock()
		if e != nil { // this process committed it: no parsing (latest.go)
			latest, ids, cached = &e.m, e.ids, true
			break
		}
		if m, err := s.Manifest(srv, b); err == nil && len(m.Files) > 0 {
			latest = &m
			break
		}
	}
	if latest == nil {
		return nil
	}
	// Most files and chunks come again: room for them, and a little more,
	// rather than the copies of growing one append at a time.
	w.files = slices.Grow(w.files, len(latest.Files)+len(latest.Files)/16)
	// The appender's lists too: the hint goes to it in stream order.
	w.addPart(segPart{end: w.mark, room: &room{
		chunks: len(latest.Chunks) + len(latest.Chunks)/16,
		segs:   len(latest.Files) + len(latest.Files)/8,
	}})
	if ids == nil {
		ids = make([]blobID, 0, len(latest.Chunks))
		for _, c := range latest.Chunks {
			if h, err := parseHash(c.Hash); err == nil {
				ids = append(ids, h)
			}
		}
	}
	s.mu.Lock()
	w.listPins = append(w.listPins, s.pinListLocked(ids)) // ids: read only, may be the cache's
	s.mu.Unlock()
	if !s.exists(manifestName(latest.Server, latest.Backup)) {
		return nil // deleted meanwhile: its blobs may be gone
	}
	x := &FileIndex{m: latest, checked: cached}
	if len(ids) == len(latest.Chunks) {
		x.ids = ids
	}
	return x
}

// LatestFiles is LatestIndex as a map by path.
func (w *Writer) LatestFiles(server string) map[string]PrevFile {
	x := w.LatestIndex(server)
	if x == nil {
		return nil
	}
	out := make(map[string]PrevFile, len(x.m.Files))
	for _, f := range x.m.Files {
		if p, ok := x.file(f); ok {
			out[f.Path] = p
		}
	}
	return out
}

// FileHook is the archive's file hook (archive.FileHook) of a backup in
// the repository: each regular file's tar entry is a segment of its own,
// in the manifest's file index, and a file whose stat is the one of the
// server's latest backup is not read: its chunks are reused. The backup
// only wires it (WriteOptions.Files).
//
// An empty file (by the walk's lstat) is not the hook's (archive.FileHook,
// issue 33): its entry, a tar header, stays in the stream's run of such
// entries, chunked with them, and the file is neither opened nor indexed.
// Empty files cost no disk, so a game can make hundreds of thousands; as
// segments of their own, each was a chunk, an index entry and pins (~1.8
// KiB of the daemon's memory a file), and reusing one saved only its
// open. Each backup writes their headers again, and the run's chunks, made
// of the same bytes, are found in the repository.
type FileHook struct {
	w      *Writer
	prev   *FileIndex
	start  int
	onRead func(rel string)
}

// FileHook is w's file hook, which reuses the files of the latest backup
// of w's server (read under ctx); onRead, when set, is told each file the
// backup reads (tests).
func (w *Writer) FileHook(ctx context.Context, onRead func(rel string)) *FileHook {
	return &FileHook{w: w, prev: w.latestIndex(ctx, w.head.Server), onRead: onRead}
}

// fileKey is what says a file is unchanged: as the live transfer's scan,
// size, mtime and inode, plus ctime and mode (a chmod, a rename over it).
func fileKey(rel string, fi fs.FileInfo) (File, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return File{}, false
	}
	return File{
		Path: rel, Size: fi.Size(), MtimeNs: st.Mtim.Nano(), CtimeNs: st.Ctim.Nano(),
		Ino: st.Ino, Dev: uint64(st.Dev), Mode: st.Mode,
	}, true
}

func sameKey(a, b File) bool {
	return a.Size == b.Size && a.MtimeNs == b.MtimeNs && a.CtimeNs == b.CtimeNs &&
		a.Ino == b.Ino && a.Dev == b.Dev && a.Mode == b.Mode
}

// Reuse puts the chunks of an unchanged file in the stream.
func (h *FileHook) Reuse(rel string, fi fs.FileInfo) ([]byte, bool) {
	p, ok := h.prev.Find(rel)
	if !ok {
		return nil, false
	}
	k, ok := fileKey(rel, fi)
	if !ok || !sameKey(k, p.File) {
		return nil, false
	}
	if h.w.Cut() != nil {
		return nil, false
	}
	first := h.w.Len()
	if !h.w.Reuse(p) {
		return nil, false
	}
	// First and Count are in the writer's segments (Len): one here. The
	// stream is bare: no SHA-1 to carry over.
	k.First, k.Count = first, h.w.Len()-first
	h.w.AddFile(k)
	return nil, true
}

// Begin starts the file's segment.
func (h *FileHook) Begin(rel string) error {
	if err := h.w.Cut(); err != nil {
		return err
	}
	h.start = h.w.Len()
	if h.onRead != nil {
		h.onRead(rel)
	}
	return nil
}

// End ends the file's segment and indexes it, unless it changed while it
// was read.
func (h *FileHook) End(rel string, fi fs.FileInfo, sum []byte) error {
	if err := h.w.Cut(); err != nil {
		return err
	}
	if fi == nil {
		return nil
	}
	k, ok := fileKey(rel, fi)
	if !ok {
		return nil
	}
	k.First, k.Count = h.start, h.w.Len()-h.start
	h.w.AddFile(k)
	return nil
}
