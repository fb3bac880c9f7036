package chunkstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Write stores the tar stream r as backup of server. The server and backup
// must be safe path elements (the caller checks UUIDs).
func (s *Store) Write(server, backup string, r io.Reader) (Manifest, error) {
	w := s.NewWriter(server, backup)
	defer w.Abort()
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(w, onlyRead{r}, buf); err != nil {
		return Manifest{}, err
	}
	return w.Commit()
}

type onlyRead struct{ io.Reader }

// segmentFlush is how much of a segment is buffered before its chunks,
// but the last, are cut; the last one may grow with the next bytes.
const segmentFlush = 8 << 20

// Writer stores a backup's tar stream as it is written. The stream is
// made of segments (Cut ends one): each is chunked on its own, so a
// segment's chunks depend only on its bytes. The backup repository makes
// each regular file's tar entry a segment, and then reuses an unchanged
// file's chunks (Reuse) without reading it.
//
// Pipeline: the caller's goroutine (the walk reading files) hands the
// segments to one chunker goroutine; GOMAXPROCS workers hash and compress
// the chunks; one appender takes them in order, skips the ones the
// repository or this backup has, and appends the others to the backup's
// pack; one uploader stores each full pack while the next fills.
type Writer struct {
	s      *Store
	ctx    context.Context
	m      Manifest
	pinned map[blobID]struct{} // guarded by s.mu

	// The caller's side: the segment being written, whether pieces of it
	// went to the chunker already, and the segments so far (Len).
	seg     []byte
	segOpen bool
	nsegs   int
	files   []File // First and Count in segments until Commit

	// The chunker's side (chunkLoop): what is left of the current
	// segment, and where each segment starts in m.Chunks.
	segs      chan segPiece
	free      chan []byte
	chunker   sync.WaitGroup
	carry     []byte
	inSeg     bool
	segStarts []int

	jobs    chan *pending
	order   chan *pending
	workers sync.WaitGroup
	app     sync.WaitGroup
	resMu   sync.Mutex // m.Chunks
	errMu   sync.Mutex
	err     error
	stopped bool

	// The appender's own.
	pack packer
	mine map[blobID]struct{} // blobs in this backup's packs

	uploads chan packUpload
	up      sync.WaitGroup
	upMu    sync.Mutex
	packs   []indexedPack // packs stored, not yet indexed
}

// pending is a chunk on its way from the chunker to the appender.
type pending struct {
	i     int
	n     int
	data  []byte // returned to the pool by the worker
	done  chan struct{}
	h     blobID
	blob  []byte // nil when the repository has it; returned by the appender
	raw   bool   // blob is the plain chunk, to be stored raw
	known bool
}

// segPiece is bytes of a segment (the last ones when final), or the
// reused chunks of a segment.
type segPiece struct {
	data  []byte
	final bool
	reuse []Chunk
}

// NewWriter starts backup of server; Commit ends it, Abort drops it.
func (s *Store) NewWriter(server, backup string) *Writer {
	n := max(2, runtime.GOMAXPROCS(0))
	w := &Writer{
		s:      s,
		ctx:    context.Background(),
		m:      Manifest{Version: manifestVersion, Server: server, Backup: backup, Created: time.Now().UTC()},
		pinned: map[blobID]struct{}{},
		jobs:   make(chan *pending, 2*n),
		order:  make(chan *pending, 4*n),
		mine:   map[blobID]struct{}{},
		// Two packs are stored at once (one is written while the other is
		// synced) and one fills: three pack buffers, ~57 MiB, at most.
		uploads: make(chan packUpload),
		segs:    make(chan segPiece, 2),
		free:    make(chan []byte, 8),
	}
	for range n {
		w.workers.Go(w.work)
	}
	w.pack.free = make(chan []byte, packUploaders+1)
	w.app.Go(w.appendLoop)
	for range packUploaders {
		w.up.Go(w.uploadLoop)
	}
	w.chunker.Go(w.chunkLoop)
	return w
}

func (w *Writer) work() {
	for p := range w.jobs {
		p.h = sha256.Sum256(p.data)
		// An indexed blob is pinned and not compressed again.
		// An incompressible chunk goes to the pack as it is (no copy into
		// a blob first): the appender writes its kind byte and returns it.
		p.known = w.s.pinIfIndexed(p.h, w.pinned)
		switch {
		case !p.known && incompressible(p.data):
			p.blob, p.raw = p.data, true
		case !p.known:
			p.blob = encodeBlobTo(w.s.bufs.get(blobBound(len(p.data))), p.data)
			fallthrough
		default:
			w.s.bufs.put(p.data)
		}
		p.data = nil
		close(p.done)
	}
}

func (w *Writer) fail(err error) {
	w.errMu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.errMu.Unlock()
}

func (w *Writer) failed() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.err
}

// appendLoop takes the chunks in stream order. After an error it only
// drains them, so the chunker never blocks.
func (w *Writer) appendLoop() {
	for p := range w.order {
		<-p.done
		w.resMu.Lock()
		w.m.Chunks[p.i].Hash = hex.EncodeToString(p.h[:])
		w.resMu.Unlock()
		if _, ok := w.mine[p.h]; p.known || ok || w.failed() != nil {
			if p.blob != nil {
				w.s.bufs.put(p.blob)
			}
			continue
		}
		w.s.mu.Lock()
		w.s.pinLocked(p.h, w.pinned)
		w.s.mu.Unlock()
		w.mine[p.h] = struct{}{}
		if p.raw {
			w.pack.addRaw(p.h, p.blob)
		} else {
			w.pack.add(p.h, p.blob, p.n)
		}
		w.s.bufs.put(p.blob)
		if w.pack.full() {
			w.flushPack()
		}
	}
}

// flushPack hands the current pack to the uploader. It is in flight (no
// GC removes it) from now until Commit or Abort.
func (w *Writer) flushPack() {
	if w.pack.empty() {
		return
	}
	id := newID()
	b, es := w.pack.finish()
	w.s.mu.Lock()
	w.s.inflight[id] = struct{}{}
	w.s.mu.Unlock()
	w.uploads <- packUpload{indexedPack{ID: id, Entries: es}, b}
}

type packUpload struct {
	p    indexedPack
	data []byte
}

// packUploaders is how many packs are stored at once: with one, the
// disk idled while a pack was written to the page cache and the chunking
// waited while it was synced.
const packUploaders = 2

// uploadLoop stores the packs while the next ones are filled, so that a
// Put (an fsync, a request) does not stall the chunking.
func (w *Writer) uploadLoop() {
	for u := range w.uploads {
		if w.failed() == nil {
			w.upload(u)
		}
		select {
		case w.pack.free <- u.data:
		default:
		}
	}
}

func (w *Writer) upload(u packUpload) {
	if err := w.s.b.Put(w.ctx, packName(u.p.ID), u.data); err != nil {
		w.fail(fmt.Errorf("storing a pack: %w", err))
		return
	}
	w.upMu.Lock()
	w.packs = append(w.packs, u.p)
	w.upMu.Unlock()
}

// Write adds p to the current segment.
func (w *Writer) Write(p []byte) (int, error) {
	if err := w.failed(); err != nil {
		return 0, err
	}
	w.seg = append(w.seg, p...)
	if len(w.seg) >= segmentFlush {
		w.send(false)
	}
	return len(p), w.failed()
}

// send hands the buffered segment bytes to the chunker.
func (w *Writer) send(final bool) {
	w.segs <- segPiece{data: w.seg, final: final}
	w.segOpen = !final
	select {
	case b := <-w.free:
		w.seg = b[:0]
	default:
		// Grows as needed; recycled buffers keep their size.
		w.seg = make([]byte, 0, 256<<10)
	}
}

// Cut ends the current segment: the next byte starts a chunk.
func (w *Writer) Cut() error {
	if w.failed() == nil && (len(w.seg) > 0 || w.segOpen) {
		w.send(true)
		w.nsegs++
	}
	return w.failed()
}

// Len is the number of segments so far (call after Cut): a file's First
// and Count are in segments until Commit turns them into chunk indices.
func (w *Writer) Len() int { return w.nsegs }

// Reuse ends the current segment and appends, as one segment, chunks of
// the backup LatestFiles read (a file's unchanged entry; they are pinned).
func (w *Writer) Reuse(cs []Chunk) bool {
	if w.Cut() != nil {
		return false
	}
	w.segs <- segPiece{reuse: cs}
	w.nsegs++
	return true
}

// AddFile records a file of the backup in the manifest's file index, its
// First and Count in segments (Len).
func (w *Writer) AddFile(f File) { w.files = append(w.files, f) }

// chunkLoop cuts the segments into chunks, in order, on its own goroutine
// (the caller's reads the files), and hands them to the workers and the
// appender. After an error it only drains.
func (w *Writer) chunkLoop() {
	defer close(w.order)
	defer close(w.jobs)
	for p := range w.segs {
		if p.reuse != nil {
			w.resMu.Lock()
			w.segStarts = append(w.segStarts, len(w.m.Chunks))
			w.m.Chunks = append(w.m.Chunks, p.reuse...)
			w.resMu.Unlock()
			continue
		}
		if !w.inSeg {
			w.resMu.Lock()
			w.segStarts = append(w.segStarts, len(w.m.Chunks))
			w.resMu.Unlock()
			w.inSeg = true
		}
		buf := p.data
		if len(w.carry) > 0 {
			w.carry = append(w.carry, p.data...)
			buf = w.carry
		}
		var rest []byte
		if w.failed() == nil {
			rest = w.chunk(buf, p.final)
		}
		w.carry = append(w.carry[:0:0], rest...)
		if p.final {
			w.inSeg, w.carry = false, nil
		}
		select {
		case w.free <- p.data:
		default:
		}
	}
}

// chunk cuts buf into chunks and hands them on; unless final, the last
// chunk's bytes are returned (more of the segment follows, and the
// chunker would cut it elsewhere).
func (w *Writer) chunk(buf []byte, final bool) []byte {
	off := 0
	for off < len(buf) {
		n := cutPoint(buf[off:])
		if !final && off+n == len(buf) {
			break
		}
		w.resMu.Lock()
		i := len(w.m.Chunks)
		w.m.Chunks = append(w.m.Chunks, Chunk{Len: int64(n)})
		w.resMu.Unlock()
		data := w.s.bufs.get(n)
		copy(data, buf[off:off+n])
		p := &pending{i: i, n: n, data: data, done: make(chan struct{})}
		w.order <- p
		w.jobs <- p
		off += n
	}
	return buf[off:]
}

// fileIndex turns the files' segment ranges into chunk ranges.
func (w *Writer) fileIndex() error {
	starts := append(w.segStarts, len(w.m.Chunks))
	for _, f := range w.files {
		if f.First < 0 || f.Count < 0 || f.First+f.Count >= len(starts) {
			return fmt.Errorf("file %s: segments %d+%d of %d", f.Path, f.First, f.Count, len(starts)-1)
		}
		f.First, f.Count = starts[f.First], starts[f.First+f.Count]-starts[f.First]
		w.m.Files = append(w.m.Files, f)
	}
	return nil
}

// stop ends the pipeline (storing the last pack) and returns the first
// error.
func (w *Writer) stop() error {
	if !w.stopped {
		w.stopped = true
		close(w.segs)
		w.chunker.Wait()
		w.workers.Wait()
		w.app.Wait()
		if w.failed() == nil {
			w.flushPack()
		}
		close(w.uploads)
		w.up.Wait()
	}
	return w.failed()
}

// Abort drops an unfinished backup (its packs go at the next GC).
func (w *Writer) Abort() {
	_ = w.stop()
	w.s.unpin(w.pinned)
	w.pinned = map[blobID]struct{}{}
	w.s.mu.Lock()
	for _, p := range w.packs {
		delete(w.s.inflight, p.ID)
	}
	w.s.mu.Unlock()
	w.packs = nil
}

// Commit stores the index of the backup's packs, then its manifest.
func (w *Writer) Commit() (Manifest, error) {
	defer w.Abort()
	if err := w.Cut(); err != nil {
		return Manifest{}, err
	}
	if err := w.stop(); err != nil {
		return Manifest{}, err
	}
	if err := w.fileIndex(); err != nil {
		return Manifest{}, err
	}
	s, m := w.s, w.m
	m.Size = 0
	for _, c := range m.Chunks {
		m.Size += c.Len
	}
	m.SHA1 = ChunkListSHA1(m.Chunks)
	if err := w.storeIndex(); err != nil {
		return Manifest{}, err
	}
	if err := s.checkIndexed(m); err != nil {
		return Manifest{}, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return Manifest{}, err
	}
	if err := s.b.Put(w.ctx, manifestName(m.Server, m.Backup), b); err != nil {
		return Manifest{}, err
	}
	s.mu.Lock()
	if s.gcActive {
		for h := range w.pinned {
			s.gcKeep[h] = struct{}{}
		}
	}
	s.mu.Unlock()
	return m, nil
}

// storeIndex stores the index object of the backup's packs and adds them
// to the in-memory index (they stay pinned by the writer).
func (w *Writer) storeIndex() error {
	if len(w.packs) == 0 {
		return nil
	}
	name := "index/" + newID()
	if err := w.s.b.Put(w.ctx, name, encodeIndex(w.packs)); err != nil {
		return fmt.Errorf("storing the index: %w", err)
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.indexes[name] = struct{}{}
	for _, p := range w.packs {
		w.s.addPackLocked(p.ID, p.Entries)
	}
	return nil
}

// checkIndexed refuses to write a manifest naming a blob the repository
// has no index entry for (a lost index: the unindexed packs are read).
func (s *Store) checkIndexed(m Manifest) error {
	for _, c := range m.Chunks {
		h, err := parseHash(c.Hash)
		if err != nil {
			return err
		}
		if _, ok := s.lookup(h); !ok {
			return fmt.Errorf("chunk %s of the backup is not in the repository", c.Hash[:16])
		}
	}
	return nil
}

// PrevFile is a file of an earlier backup with its entry's chunks.
type PrevFile struct {
	File
	Chunks []Chunk
}

// LatestFiles is the file index of the latest backup of server, by path;
// nil when there is none with an index. Manifests are written once, so
// the newest object is the latest backup: only it is parsed (a manifest
// is large for a server of many files).
//
// Every chunk of that backup is pinned for w, and only then is its
// manifest checked to be still there: a blob a manifest names is removed
// by no GC (see GC), so each reused chunk stays stored.
func (w *Writer) LatestFiles(server string) map[string]PrevFile {
	s := w.s
	objs, _ := s.b.List(w.ctx, "snapshots/"+server+"/")
	slices.SortFunc(objs, func(a, b ObjectInfo) int { return b.ModTime.Compare(a.ModTime) })
	var latest *Manifest
	for _, o := range objs {
		srv, b, ok := manifestObject(o.Name)
		if !ok || srv != server {
			continue
		}
		if m, err := s.Manifest(srv, b); err == nil && len(m.Files) > 0 {
			latest = &m
			break
		}
	}
	if latest == nil {
		return nil
	}
	s.mu.Lock()
	for _, c := range latest.Chunks {
		if h, err := parseHash(c.Hash); err == nil {
			s.pinLocked(h, w.pinned)
		}
	}
	s.mu.Unlock()
	if !s.exists(manifestName(latest.Server, latest.Backup)) {
		return nil // deleted meanwhile: its blobs may be gone
	}
	out := make(map[string]PrevFile, len(latest.Files))
	for _, f := range latest.Files {
		if cs, ok := latest.Entry(f); ok {
			out[f.Path] = PrevFile{File: f, Chunks: cs}
		}
	}
	return out
}
