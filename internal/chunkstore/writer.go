package chunkstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
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
// but the last, are cut; the last one may grow with the next bytes. It
// was 8 MiB: four batch buffers of 9 MiB in flight, and twice that in the
// Go heap's goal, were most of a long segment's memory (a large file's,
// or the run of 200,000 empty files' headers: issue 33 item 4); a MiB
// costs a hand-off per MiB, not per file.
const segmentFlush = 1 << 20

// Writer stores a backup's tar stream as it is written. The stream is
// made of segments (Cut ends one): each is chunked on its own, so a
// segment's chunks depend only on its bytes. The backup repository makes
// each regular file's tar entry a segment, and then reuses an unchanged
// file's chunks (Reuse) without reading it.
//
// Pipeline: the caller's goroutine (the walk reading files) hands the
// segments, in batches of about a MiB, to one chunker goroutine;
// GOMAXPROCS workers hash and compress the chunks, in groups of about a
// MiB; one appender takes them in order, skips the ones the repository or
// this backup has, and appends the others to the backup's pack; two
// uploaders store the full packs while the next fills. The batches and
// groups make a tree of small files wake each goroutine once per MiB, not
// once per file (each wake-up costs microseconds; a server has tens of
// thousands of small files).
type Writer struct {
	s      *Store
	ctx    context.Context
	m      Manifest
	pinned map[blobID]struct{} // guarded by s.mu
	// The previous backup's chunks (LatestIndex), pinned as lists (keys
	// of Store.listPins) rather than one by one: a second backup reuses
	// tens of thousands of them.
	listPins []int
	own      ownChunks // what it may skip (policy.go)
	// unlease releases the node's lease on a shared repository (shared.go).
	unlease func()

	// The caller's side: the batch being gathered, where its last part
	// ends, whether part of the open segment went to the chunker
	// already, and the segments so far (Len).
	batch   segBatch
	mark    int
	segOpen bool
	nsegs   int
	files   []File // First and Count in segments until Commit

	// The chunker's side (chunkLoop): what is left of the current
	// segment, where each segment starts in m.Chunks, and the chunks not
	// yet handed to the workers.
	segs      chan segBatch
	freeParts chan []segPart // batches' part lists the chunker is through with
	chunker   sync.WaitGroup
	carry     []byte
	inSeg     bool
	segStarts []int
	group     *chunkGroup

	jobs    chan *chunkGroup
	order   chan *chunkGroup
	workers sync.WaitGroup
	app     sync.WaitGroup
	resMu   sync.Mutex // m.Chunks, ids, idsLost
	// ids is the decoded hash of each chunk of m.Chunks, unless idsLost
	// (chunks reused without theirs): the commit's check needs them, and
	// decoding 70,000 hex hashes took milliseconds.
	ids     []blobID
	idsLost bool
	// checked is the ranges [from, to) of m.Chunks reused from a backup
	// this Store committed (PrevFile.checked): the commit's check skips
	// them.
	checked [][2]int
	errMu   sync.Mutex
	err     error
	stopped bool
	drained bool

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
	h     blobID
	blob  []byte // nil when the repository has it; returned by the appender
	raw   bool   // blob is the plain chunk, to be stored raw
	known bool
}

// segBatch is consecutive parts of the stream: data holds their bytes,
// one part after the other.
type segBatch struct {
	data  []byte
	parts []segPart
}

// segPart is the bytes of a segment from the previous part's end to end
// (the segment's last ones when final), or the reused chunks of a whole
// segment (then it has no bytes).
type segPart struct {
	end      int
	final    bool
	reuse    []Chunk
	reuseIDs []blobID // reuse's hashes decoded, when known
	checked  bool     // reuse is PrevFile.checked
}

// chunkGroup is chunks that travel together from the chunker through a
// worker to the appender; done is closed when the worker is through.
type chunkGroup struct {
	ps    []*pending
	bytes int
	done  chan struct{}
}

// batchFlush and groupFlush are the sizes at which a batch of segments
// and a group of chunks are handed on; batchParts bounds the parts of a
// batch of reused files (they have no bytes).
const (
	batchFlush = 1 << 20
	groupFlush = 1 << 20
	batchParts = 1024
)

// NewWriter starts backup of server; Commit ends it, Abort drops it.
func (s *Store) NewWriter(server, backup string) *Writer {
	n := max(2, runtime.GOMAXPROCS(0))
	w := &Writer{
		s:      s,
		ctx:    context.Background(),
		m:      Manifest{Version: manifestVersion, Server: server, Backup: backup, Created: time.Now().UTC()},
		pinned: map[blobID]struct{}{},
		jobs:   make(chan *chunkGroup, n),
		order:  make(chan *chunkGroup, 2*n),
		mine:   map[blobID]struct{}{},
		// Two packs are stored at once (one is written while the other is
		// synced) and one fills: three pack buffers, ~57 MiB, at most.
		uploads: make(chan packUpload),
		segs:    make(chan segBatch, 2),
		// The part lists of the batches in flight and the one filling.
		freeParts: make(chan []segPart, 4),
	}
	w.own.all = s.currentPolicy().NodeWideDedup
	// A shared repository: the node's lease first, so that no other
	// node's collector runs while this backup decides what is stored.
	if rel, err := s.acquireLease(w.ctx); err != nil {
		w.fail(err)
		w.unlease = func() {}
	} else {
		w.unlease = rel
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
	for g := range w.jobs {
		for _, p := range g.ps {
			w.hashAndEncode(p)
		}
		close(g.done)
	}
}

// hashAndEncode hashes a chunk and, unless the repository has it,
// compresses it.
func (w *Writer) hashAndEncode(p *pending) {
	p.h = sha256.Sum256(p.data)
	// An indexed blob the writer may reuse is pinned and not compressed
	// again.
	p.known = w.mayReuse(p.h) && w.s.pinIfIndexed(p.h, w.pinned)
	if p.known {
		w.s.bufs.put(p.data)
		p.data = nil
		return
	}
	buf := w.s.bufs.get(blobBound(len(p.data)))
	if p.blob = compress(buf, p.data); p.blob != nil {
		w.s.bufs.put(p.data)
	} else {
		// Incompressible: the chunk goes to the pack as it is (no copy
		// into a blob first); the appender writes its kind byte and
		// returns it.
		w.s.bufs.put(buf)
		p.blob, p.raw = p.data, true
	}
	p.data = nil
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
	for g := range w.order {
		<-g.done
		w.resMu.Lock()
		for _, p := range g.ps {
			w.m.Chunks[p.i].Hash = hex.EncodeToString(p.h[:])
			w.ids[p.i] = p.h
		}
		w.resMu.Unlock()
		for _, p := range g.ps {
			w.appendChunk(p)
		}
	}
}

// appendChunk adds a chunk to the pack unless the repository or this
// backup has it.
func (w *Writer) appendChunk(p *pending) {
	if _, ok := w.mine[p.h]; p.known || ok || w.failed() != nil {
		if p.blob != nil {
			w.s.bufs.put(p.blob)
		}
		return
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

// flushPack hands the current pack to the uploader. It is in flight (no
// GC removes it) from now until Commit or Abort.
func (w *Writer) flushPack() {
	if u, ok := w.finishPack(); ok {
		w.uploads <- u
	}
}

// finishPack ends the current pack, if any, and puts it in flight.
func (w *Writer) finishPack() (packUpload, bool) {
	if w.pack.empty() {
		return packUpload{}, false
	}
	id := newID()
	b, es := w.pack.finish()
	w.s.mu.Lock()
	w.s.inflight[id] = struct{}{}
	w.s.mu.Unlock()
	return packUpload{indexedPack{ID: id, Entries: es}, b}, true
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
	if w.batch.data == nil {
		w.batch.data = w.s.batchBuf()
	}
	w.batch.data = append(w.batch.data, p...)
	if len(w.batch.data) >= segmentFlush {
		// The open segment's bytes so far go as a part of it.
		w.addPart(segPart{end: len(w.batch.data)})
		w.segOpen = true
		w.send()
	}
	return len(p), w.failed()
}

func (w *Writer) addPart(p segPart) {
	w.batch.parts = append(w.batch.parts, p)
	w.mark = p.end
}

// send hands the batch to the chunker.
func (w *Writer) send() {
	w.segs <- w.batch
	w.batch, w.mark = segBatch{}, 0
	w.batch.data = w.s.batchBuf()
	// A part list used before: one grown append by append to 1,024 parts
	// for each batch of reused files cost a millisecond a backup.
	select {
	case p := <-w.freeParts:
		w.batch.parts = p
	default:
	}
}

// batchBufCap is a batch buffer's room: the bytes at which a batch is
// sent and the largest write the walk makes, so that a large file never
// grows (copies) it.
const batchBufCap = segmentFlush + 1<<20

// batchBuf is an empty batch buffer, one a writer used before when there
// is one: a new one is zeroed, ~1 ms for each of the few a backup holds.
func (s *Store) batchBuf() []byte {
	if b, ok := s.batches.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, batchBufCap)
}

// putBatchBuf returns a batch buffer the chunker is through with.
func (s *Store) putBatchBuf(b []byte) {
	if cap(b) == batchBufCap {
		s.batches.Put(&b)
	}
}

// sendFull hands the batch on when it is large enough.
func (w *Writer) sendFull() {
	if len(w.batch.data) >= batchFlush || len(w.batch.parts) >= batchParts {
		w.send()
	}
}

// Cut ends the current segment: the next byte starts a chunk.
func (w *Writer) Cut() error {
	if w.failed() == nil && (len(w.batch.data) > w.mark || w.segOpen) {
		w.addPart(segPart{end: len(w.batch.data), final: true})
		w.segOpen = false
		w.nsegs++
		w.sendFull()
	}
	return w.failed()
}

// Len is the number of segments so far (call after Cut): a file's First
// and Count are in segments until Commit turns them into chunk indices.
func (w *Writer) Len() int { return w.nsegs }

// Reuse ends the current segment and appends, as one segment, the chunks
// of f, a file of the backup LatestIndex or LatestFiles read (its
// unchanged entry; they are pinned).
func (w *Writer) Reuse(f PrevFile) bool {
	if w.Cut() != nil {
		return false
	}
	w.addPart(segPart{end: w.mark, reuse: f.Chunks, reuseIDs: f.ids, checked: f.checked})
	w.nsegs++
	w.sendFull()
	return true
}

// SetBare marks the backup's stream as having no integrity entry
// (Manifest.Bare).
func (w *Writer) SetBare() { w.m.Bare = true }

// AddFile records a file of the backup in the manifest's file index, its
// First and Count in segments (Len).
func (w *Writer) AddFile(f File) { w.files = append(w.files, f) }

// addRange adds [from, to) to the ascending ranges rs, joining it to the
// last one when they touch.
func addRange(rs [][2]int, from, to int) [][2]int {
	if n := len(rs); n > 0 && rs[n-1][1] == from {
		rs[n-1][1] = to
		return rs
	}
	return append(rs, [2]int{from, to})
}

// chunkLoop cuts the segments into chunks, in order, on its own goroutine
// (the caller's reads the files), and hands them to the workers and the
// appender. After an error it only drains.
func (w *Writer) chunkLoop() {
	defer close(w.order)
	defer close(w.jobs)
	for b := range w.segs {
		from := 0
		for _, p := range b.parts {
			if p.reuse != nil {
				w.resMu.Lock()
				w.segStarts = append(w.segStarts, len(w.m.Chunks))
				w.m.Chunks = append(w.m.Chunks, p.reuse...)
				w.ids = append(w.ids, p.reuseIDs...)
				w.idsLost = w.idsLost || len(p.reuseIDs) != len(p.reuse)
				if p.checked {
					w.checked = addRange(w.checked, len(w.m.Chunks)-len(p.reuse), len(w.m.Chunks))
				}
				w.resMu.Unlock()
				continue
			}
			w.segmentPart(b.data[from:p.end], p.final)
			from = p.end
		}
		w.handGroup()
		w.s.putBatchBuf(b.data)
		clear(b.parts) // the reused chunks are not held
		select {
		case w.freeParts <- b.parts[:0]:
		default:
		}
	}
}

// segmentPart chunks the bytes of a part of a segment.
func (w *Writer) segmentPart(data []byte, final bool) {
	if !w.inSeg {
		w.resMu.Lock()
		w.segStarts = append(w.segStarts, len(w.m.Chunks))
		w.resMu.Unlock()
		w.inSeg = true
	}
	buf := data
	if len(w.carry) > 0 {
		w.carry = append(w.carry, data...)
		buf = w.carry
	}
	var rest []byte
	if w.failed() == nil {
		rest = w.chunk(buf, final)
	}
	// The batch's buffer is reused: what is left is copied.
	w.carry = append(w.carry[:0:0], rest...)
	if final {
		w.inSeg, w.carry = false, nil
	}
}

// chunk cuts buf into chunks and adds them to the group; unless final,
// the last chunk's bytes are returned (more of the segment follows, and
// the chunker would cut it elsewhere).
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
		w.ids = append(w.ids, blobID{}) // the appender sets it
		w.resMu.Unlock()
		data := w.s.bufs.get(n)
		copy(data, buf[off:off+n])
		if w.group == nil {
			w.group = &chunkGroup{done: make(chan struct{})}
		}
		w.group.ps = append(w.group.ps, &pending{i: i, n: n, data: data})
		w.group.bytes += n
		if w.group.bytes >= groupFlush {
			w.handGroup()
		}
		off += n
	}
	return buf[off:]
}

// handGroup hands the chunks gathered so far to a worker and, in order,
// to the appender.
func (w *Writer) handGroup() {
	if w.group == nil {
		return
	}
	w.order <- w.group
	w.jobs <- w.group
	w.group = nil
}

// fileIndex turns the files' segment ranges into chunk ranges.
func (w *Writer) fileIndex() error {
	starts := append(w.segStarts, len(w.m.Chunks))
	for i := range w.files {
		f := &w.files[i]
		if f.First < 0 || f.Count < 0 || f.First+f.Count >= len(starts) {
			return fmt.Errorf("file %s: segments %d+%d of %d", f.Path, f.First, f.Count, len(starts)-1)
		}
		f.First, f.Count = starts[f.First], starts[f.First+f.Count]-starts[f.First]
	}
	w.m.Files, w.files = w.files, nil
	return nil
}

// stop ends the pipeline (storing the last pack) and returns the first
// error.
func (w *Writer) stop() error {
	if !w.stopped {
		w.stopped = true
		w.drain()
		if w.failed() == nil {
			w.flushPack()
		}
		close(w.uploads)
		w.up.Wait()
	}
	return w.failed()
}

// drain ends the chunking: every chunk has its hash, and is in the
// repository or in this backup's packs (the last one not yet stored).
func (w *Writer) drain() {
	if !w.drained {
		w.drained = true
		if len(w.batch.parts) > 0 && w.failed() == nil {
			w.send()
		}
		close(w.segs)
		w.chunker.Wait()
		w.workers.Wait()
		w.app.Wait()
	}
}

// Abort drops an unfinished backup (its packs go at the next GC).
func (w *Writer) Abort() {
	w.release(false)
}

// release ends the writer. The pins of a committed backup are dropped in
// the background (the commit's report need not wait for a map update per
// new chunk, 70,000 in a first backup): its manifest, durable now, keeps its blobs, and a GC waits
// for such releases before it marks (Store.waitUnpinned).
func (w *Writer) release(committed bool) {
	_ = w.stop()
	if w.batch.data != nil {
		w.s.putBatchBuf(w.batch.data)
		w.batch.data = nil
	}
	if committed {
		w.s.unpinLater(w.pinned, w.listPins)
	} else {
		w.s.unpin(w.pinned, w.listPins)
	}
	w.pinned, w.listPins = map[blobID]struct{}{}, nil
	w.s.mu.Lock()
	for _, p := range w.packs {
		delete(w.s.inflight, p.ID)
	}
	w.s.mu.Unlock()
	w.packs = nil
	w.unlease()
}

// Commit stores the index of the backup's packs, then its manifest. The
// manifest is made (and checked) while the last pack and the index are
// stored: a small backup's commit is mostly those two Puts. Over a Stager
// the last pack, the index and the manifest are synced at once and made
// visible in that order (commitStaged).
func (w *Writer) Commit() (Manifest, error) {
	committed := false
	defer func() { w.release(committed) }()
	if err := w.Cut(); err != nil {
		return Manifest{}, err
	}
	w.drain()
	var (
		m, cm         Manifest
		ids           []blobID
		b             []byte
		perr          error
		ready, cloned sync.WaitGroup
	)
	if w.failed() == nil {
		ready.Go(func() { m, ids, b, perr = w.prepare() })
	}
	manifest := func() (string, []byte, error) {
		ready.Wait()
		if perr == nil {
			perr = w.s.leaseValid()
		}
		// The caller gets m: the cache keeps its own slices, copied
		// while the manifest is stored.
		cloned.Go(func() {
			cm = m
			cm.Chunks, cm.Files = slices.Clone(m.Chunks), slices.Clone(m.Files)
		})
		return manifestName(m.Server, m.Backup), b, perr
	}
	var err error
	if st, ok := w.s.b.(Stager); ok {
		err = w.commitStaged(st, manifest)
	} else {
		err = w.commitPuts(manifest)
	}
	ready.Wait()
	cloned.Wait()
	if err != nil {
		return Manifest{}, err
	}
	s := w.s
	s.mu.Lock()
	s.latest.put(&latestEntry{server: m.Server, m: cm, ids: ids, size: len(b)})
	if s.gcActive {
		for h := range w.pinned {
			s.gcKeep[h] = struct{}{}
		}
		for _, k := range w.listPins {
			for _, h := range s.listPins[k] {
				s.gcKeep[h] = struct{}{}
			}
		}
	}
	s.mu.Unlock()
	committed = true
	return m, nil
}

// commitPuts stores the last pack, then the index, then the manifest,
// each Put durable before the next.
func (w *Writer) commitPuts(manifest func() (string, []byte, error)) error {
	err := w.stop()
	if err == nil {
		err = w.storeIndex()
	}
	name, b, merr := manifest()
	if err == nil {
		err = merr
	}
	if err != nil {
		return err
	}
	return w.s.b.Put(w.ctx, name, b)
}

// commitStaged stages the last pack, the index and the manifest at once,
// then publishes them in that order: no object is visible before those it
// names are durable, as with commitPuts, but their writes and syncs
// overlap.
func (w *Writer) commitStaged(st Stager, manifest func() (string, []byte, error)) error {
	last, hasLast := w.finishPack()
	if err := w.stop(); err != nil {
		if hasLast {
			w.packs = append(w.packs, last.p) // Abort ends its flight
		}
		return err
	}
	type object struct {
		name   string
		data   []byte
		staged Staged
		err    error
	}
	var objs []*object
	if hasLast {
		w.packs = append(w.packs, last.p)
		objs = append(objs, &object{name: packName(last.p.ID), data: last.data})
	}
	index := ""
	if len(w.packs) > 0 {
		index = "index/" + newID()
		objs = append(objs, &object{name: index, data: encodeIndex(w.packs)})
	}
	var staging sync.WaitGroup
	for _, o := range objs {
		staging.Go(func() { o.staged, o.err = st.Stage(w.ctx, o.name, o.data) })
	}
	mo := &object{}
	mo.name, mo.data, mo.err = manifest()
	if mo.err == nil {
		mo.staged, mo.err = st.Stage(w.ctx, mo.name, mo.data)
	}
	staging.Wait()
	objs = append(objs, mo)
	var err error
	for _, o := range objs {
		switch {
		case err == nil && o.err != nil:
			err = o.err
		case err == nil:
			err = o.staged.Publish()
			if err == nil && o.name == index {
				w.indexed(index)
			}
		case o.staged != nil:
			o.staged.Discard()
		}
	}
	return err
}

// prepare makes the manifest of a drained backup: its file index, size
// and checksum, its chunks' hashes decoded and checked, its encoding.
func (w *Writer) prepare() (Manifest, []blobID, []byte, error) {
	if err := w.fileIndex(); err != nil {
		return Manifest{}, nil, nil, err
	}
	m := w.m
	m.Size = 0
	for _, c := range m.Chunks {
		m.Size += c.Len
	}
	// The check, the checksum and the encoding each take milliseconds for
	// a server of many files: they run at once. The manifest is encoded
	// with a placeholder for its checksum (always 40 hex digits), written
	// over it once known.
	var (
		ids     []blobID
		ierr    error
		sum     string
		checked sync.WaitGroup
	)
	mc, known := m, w.ids
	if w.idsLost {
		known = nil
	}
	skip := w.checked
	checked.Go(func() { ids, ierr = w.s.checkIndexed(mc, known, skip, w.mine) })
	checked.Go(func() { sum = ChunkListSHA1(mc.Chunks) })
	m.SHA1 = sha1Placeholder
	b, err := encodeManifestBin(&m, known)
	checked.Wait()
	if ierr != nil {
		return Manifest{}, nil, nil, ierr
	}
	m.SHA1 = sum
	if err == nil {
		copy(b[manifestSHA1At:], sum) // a SHA-1 is always 40 hex digits
	}
	return m, ids, b, err
}

// sha1Placeholder stands for a manifest's checksum while it is encoded.
var sha1Placeholder = strings.Repeat("0", 40)

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
	w.indexed(name)
	return nil
}

// indexed adds the backup's packs, stored in the index object name, to
// the in-memory index (they stay pinned by the writer).
func (w *Writer) indexed(name string) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.indexes[name] = struct{}{}
	for _, p := range w.packs {
		w.s.addPackLocked(p.ID, p.Entries)
	}
}

// checkIndexed refuses to write a manifest naming a blob the repository
// has no index entry for (a lost index: the unindexed packs are read) and
// that is not one of the backup's own (mine: in its packs, which Commit
// indexes before it writes the manifest). It returns the chunks' hashes,
// decoded: known when the caller has them (then m's are not read). The
// chunks in the ranges skip (ascending) are not looked up: they are the
// writer's reused from a backup this Store committed (PrevFile.checked).
func (s *Store) checkIndexed(m Manifest, known []blobID, skip [][2]int, mine map[blobID]struct{}) ([]blobID, error) {
	ids := known
	if len(ids) != len(m.Chunks) {
		ids = make([]blobID, len(m.Chunks))
		for i, c := range m.Chunks {
			h, err := parseHash(c.Hash)
			if err != nil {
				return nil, err
			}
			ids[i] = h
		}
	}
	var missing []int
	s.mu.Lock()
	for i, h := range ids {
		for len(skip) > 0 && i >= skip[0][1] {
			skip = skip[1:]
		}
		if len(skip) > 0 && i >= skip[0][0] {
			continue
		}
		if _, ok := s.idx[h]; !ok {
			if _, ok := mine[h]; !ok {
				missing = append(missing, i)
			}
		}
	}
	s.mu.Unlock()
	for _, i := range missing { // lookup reads the unindexed packs once
		if _, ok := s.lookup(ids[i]); !ok {
			return nil, fmt.Errorf("chunk %s of the backup is not in the repository", m.Chunks[i].Hash[:16])
		}
	}
	return ids, nil
}

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
	s := w.s
	objs, _ := s.b.List(w.ctx, "snapshots/"+server+"/")
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
	w.resMu.Lock()
	n := len(latest.Chunks) + len(latest.Chunks)/16
	w.m.Chunks, w.ids = slices.Grow(w.m.Chunks, n), slices.Grow(w.ids, n)
	w.segStarts = slices.Grow(w.segStarts, len(latest.Files)+len(latest.Files)/8)
	w.resMu.Unlock()
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
