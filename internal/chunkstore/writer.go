package chunkstore

import (
	"context"
	"io"
	"runtime"
	"sync"
	"time"
)

// Write stores the tar stream r as backup of server. The server and backup
// must be safe path elements (the caller checks UUIDs).
func (s *Store) Write(server, backup string, r io.Reader) (Manifest, error) {
	return s.WriteBackup(context.Background(), server, backup, func(w *Writer) error {
		buf := make([]byte, 1<<20)
		_, err := io.CopyBuffer(w, onlyRead{r}, buf)
		return err
	})
}

type onlyRead struct{ io.Reader }

// WriteBackup stores backup of server: write writes its stream to w (with
// w.FileHook as the archive's file hook, the repository stores each
// regular file on its own and reuses the unchanged ones), then the backup
// is committed. The writer's stages, its stores and its commit run under
// ctx: when it ends, they stop and nothing of the backup is committed.
func (s *Store) WriteBackup(ctx context.Context, server, backup string, write func(w *Writer) error) (Manifest, error) {
	w := s.newWriter(ctx, server, backup)
	defer w.Abort()
	if err := write(w); err != nil {
		return Manifest{}, err
	}
	return w.commit(ctx)
}

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
// each regular file's tar entry a segment (FileHook), and then reuses an
// unchanged file's chunks (Reuse) without reading it.
//
// The Writer is the caller's side of the pipeline of stages.go: it
// gathers the segments into batches for the chunker, and once the stages
// are joined (drain) it commits what the appender and the uploaders made.
type Writer struct {
	s    *Store
	head Manifest // the manifest but its chunks and files
	// pinned is the blobs the backup uses, pinned by the hashers, the
	// appender and LatestIndex (guarded by s.mu). The previous backup's
	// chunks (LatestIndex) are pinned as lists (keys of Store.listPins)
	// rather than one by one: a second backup reuses tens of thousands of
	// them.
	pinned   map[blobID]struct{}
	listPins []int
	// unlease releases the node's lease on a shared repository (shared.go).
	unlease func()
	errs    *firstError
	// endCtx stops the hook that fails the writer when its context ends.
	endCtx func() bool

	// The caller's side: the batch being gathered, where its last part
	// ends, whether part of the open segment went to the chunker
	// already, the segments so far (Len), and the files (First and
	// Count in segments until Commit).
	batch   segBatch
	mark    int
	segOpen bool
	nsegs   int
	files   []File

	// The stages: the channels into the pipeline, the goroutines, and the
	// stages whose state the writer takes once they are joined.
	segs      chan segBatch
	freeParts chan []segPart // part lists the chunker is through with
	uploads   chan packUpload
	stages    sync.WaitGroup // chunker, hashers, appender
	storing   sync.WaitGroup // uploaders
	app       *appender
	ups       []*uploader
	packs     []indexedPack // stored, not yet indexed (after stop)
	drained   bool
	stopped   bool
}

// NewWriter starts backup of server; Commit ends it, Abort drops it. Its
// stages run until then, whatever happens to the caller: WriteBackup runs
// a backup under a context.
func (s *Store) NewWriter(server, backup string) *Writer {
	return s.newWriter(context.Background(), server, backup)
}

// newWriter starts the writer's stages under ctx.
func (s *Store) newWriter(ctx context.Context, server, backup string) *Writer {
	n := max(2, runtime.GOMAXPROCS(0))
	uctx, cancel := context.WithCancel(ctx)
	w := &Writer{
		s:      s,
		head:   Manifest{Version: manifestVersion, Server: server, Backup: backup, Created: time.Now().UTC()},
		pinned: map[blobID]struct{}{},
		errs:   &firstError{cancel: cancel},
		segs:   make(chan segBatch, 2),
		// The part lists of the batches in flight and the one filling.
		freeParts: make(chan []segPart, 4),
		// Two packs are stored at once (one is written while the other is
		// synced) and one fills: three pack buffers, ~57 MiB, at most.
		uploads: make(chan packUpload),
	}
	w.endCtx = context.AfterFunc(ctx, func() { w.errs.set(context.Cause(ctx)) })
	// A shared repository: the node's lease first, so that no other
	// node's collector runs while this backup decides what is stored.
	if rel, err := s.acquireLease(ctx); err != nil {
		w.errs.set(err)
		w.unlease = func() {}
	} else {
		w.unlease = rel
	}
	jobs := make(chan *chunkGroup, n)
	order := make(chan *chunkGroup, 2*n)
	free := make(chan []byte, packUploaders+1)
	h := &hashers{s: s, pinned: w.pinned, own: &ownChunks{all: s.currentPolicy().NodeWideDedup}, load: w.ownIDs}
	for range n {
		w.stages.Go(func() { h.run(jobs) })
	}
	w.app = &appender{s: s, errs: w.errs, pinned: w.pinned, uploads: w.uploads, mine: map[blobID]struct{}{}}
	w.app.pack.free = free
	w.stages.Go(func() { w.app.run(order) })
	for range packUploaders {
		u := &uploader{s: s, errs: w.errs, free: free}
		w.ups = append(w.ups, u)
		w.storing.Go(func() { u.run(uctx, w.uploads) })
	}
	c := &chunker{s: s, errs: w.errs, jobs: jobs, order: order, free: w.freeParts}
	w.stages.Go(func() { c.run(w.segs) })
	return w
}

func (w *Writer) failed() error { return w.errs.get() }

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
func (w *Writer) SetBare() { w.head.Bare = true }

// AddFile records a file of the backup in the manifest's file index, its
// First and Count in segments (Len).
func (w *Writer) AddFile(f File) { w.files = append(w.files, f) }

// drain ends the chunking: every chunk has its hash, and is in the
// repository or in this backup's packs (the last one not yet stored). The
// appender's state is the writer's from then on.
func (w *Writer) drain() {
	if !w.drained {
		w.drained = true
		if len(w.batch.parts) > 0 && w.failed() == nil {
			w.send()
		}
		close(w.segs)
		w.stages.Wait()
	}
}

// stop ends the pipeline (storing the last pack) and returns the first
// error. The uploaders' packs are the writer's from then on.
func (w *Writer) stop() error {
	if !w.stopped {
		w.stopped = true
		w.drain()
		if w.failed() == nil {
			w.app.flushPack()
		}
		close(w.uploads)
		w.storing.Wait()
		for _, u := range w.ups {
			w.packs = append(w.packs, u.packs...)
			u.packs = nil
		}
	}
	return w.failed()
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
	w.endCtx()
	w.errs.cancel()
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
	w.unlease = func() {}
}
