package sandbox

import (
	"context"
	"io/fs"
	"sync"
	"sync/atomic"
)

// WalkParallel is WalkContext with the directories listed by up to workers
// goroutines at once: fn is called concurrently and in no particular order,
// except that a directory is reported before its entries. Links are never
// followed, errors are reported to fn, and descriptors stay bounded, as in
// Walk (each worker walks a subtree deeper than heldLevels on its own, the
// way Walk does). fs.SkipDir returned for a directory skips it; fs.SkipAll
// or any other error stops the walk, and the first such error is returned
// (fs.SkipAll as nil). It is for scans of large trees (tens of thousands of
// entries), where listing and lstat-ing dominate and a second core halves
// the time.
func (f *FS) WalkParallel(ctx context.Context, dir string, workers int, fn fs.WalkDirFunc) error {
	rel, err := f.clean("walk", dir)
	if err != nil {
		return err
	}
	fi, err := f.s.root.Lstat(rel)
	if err != nil {
		return skipAllIsNil(fn(rel, nil, wrap("walk", rel, err)))
	}
	d := fs.FileInfoToDirEntry(fi)
	if err := fn(rel, d, nil); err != nil || !d.IsDir() {
		return skipAllIsNil(err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	top, err := f.s.openStart(rel, fi)
	if err != nil {
		return skipAllIsNil(fn(rel, d, wrap("walk", rel, err)))
	}
	w := &parWalk{s: f.s, ctx: ctx, fn: fn}
	w.cond = sync.NewCond(&w.mu)
	w.push(parJob{dir: top, rel: rel, d: d})
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Go(w.work)
	}
	wg.Wait()
	if p := w.err.Load(); p != nil {
		return skipAllIsNil(*p)
	}
	return nil
}

func skipAllIsNil(err error) error {
	if err == fs.SkipAll || err == fs.SkipDir {
		return nil
	}
	return err
}

// parJob is a directory to walk, at depth below the start: the entry d of
// parent, reported at rel, to be reported and opened by the worker that
// takes the job (release then drops the job's hold on parent, closed when
// its last subdirectory has opened itself); or, for the start, dir, already
// reported and open.
type parJob struct {
	parent  *level
	release func()
	dir     *level
	rel     string
	d       fs.DirEntry
	depth   int
}

type parWalk struct {
	s   *state
	ctx context.Context
	fn  fs.WalkDirFunc
	err atomic.Pointer[error]

	mu      sync.Mutex
	cond    *sync.Cond
	jobs    []parJob
	pending int // jobs queued or being worked on
}

func (w *parWalk) push(j parJob) {
	w.mu.Lock()
	w.jobs = append(w.jobs, j)
	w.pending++
	w.mu.Unlock()
	w.cond.Signal()
}

// next returns a job, or false when none is left and none can appear.
func (w *parWalk) next() (parJob, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.jobs) == 0 && w.pending > 0 {
		w.cond.Wait()
	}
	if len(w.jobs) == 0 {
		return parJob{}, false
	}
	j := w.jobs[len(w.jobs)-1]
	w.jobs = w.jobs[:len(w.jobs)-1]
	return j, true
}

func (w *parWalk) done() {
	w.mu.Lock()
	w.pending--
	last := w.pending == 0
	w.mu.Unlock()
	if last {
		w.cond.Broadcast()
	}
}

func (w *parWalk) fail(err error) {
	if err != nil && err != fs.SkipDir {
		w.err.CompareAndSwap(nil, &err)
	}
}

func (w *parWalk) work() {
	buf := make([]byte, direntBuf)
	for {
		j, ok := w.next()
		if !ok {
			return
		}
		if dir := w.open(j); dir != nil {
			w.list(j, dir, buf)
			dir.close()
		}
		w.done()
	}
}

// open reports the directory of j and opens it; nil when it is not to be
// walked (skipped, failed, or the walk is stopping).
func (w *parWalk) open(j parJob) *level {
	if j.dir != nil {
		return j.dir
	}
	defer j.release()
	if w.err.Load() != nil {
		return nil
	}
	if err := w.ctx.Err(); err != nil {
		w.fail(err)
		return nil
	}
	if err := w.fn(j.rel, j.d, nil); err != nil {
		w.fail(err)
		return nil
	}
	e := j.d.(*walkEntry)
	dir, err := openLevel(j.parent, e.name, e.id())
	if err != nil {
		w.fail(w.fn(j.rel, j.d, wrap("walk", j.rel, err)))
		return nil
	}
	return dir
}

// list reports the entries of the open directory dir of j and queues its
// subdirectories; below heldLevels it walks them itself, as Walk does.
func (w *parWalk) list(j parJob, dir *level, buf []byte) {
	if w.err.Load() != nil {
		return
	}
	if j.depth+1 >= heldLevels {
		seq := &walker{s: w.s, ctx: w.ctx, fn: w.fn, buf: buf}
		w.fail(seq.children(dir, j.depth, j.rel, j.d))
		return
	}
	entries, bad, err := listLevel(dir, buf)
	if err != nil {
		w.fail(w.fn(j.rel, j.d, wrap("walk", joinRel(j.rel, bad), err)))
		return
	}
	var subdirs []*walkEntry
	for _, e := range entries {
		if e.IsDir() {
			subdirs = append(subdirs, &walkEntry{e, dir, w.s})
			continue
		}
		if err := w.fn(joinRel(j.rel, e.name), &walkEntry{e, dir, w.s}, nil); err != nil {
			if err != fs.SkipDir {
				w.fail(err)
			}
			break
		}
	}
	if len(subdirs) == 0 || w.err.Load() != nil {
		return
	}
	// The directory stays open for its subdirectories' jobs: the last one
	// to open itself closes it (list's caller then must not).
	held := &level{fd: dir.fd, id: dir.id, name: dir.name, up: dir.up}
	dir.fd = -1
	var holds atomic.Int64
	holds.Store(int64(len(subdirs)))
	release := func() {
		if holds.Add(-1) == 0 {
			held.close()
		}
	}
	for _, e := range subdirs {
		e.dir = held
		w.push(parJob{parent: held, release: release, rel: joinRel(j.rel, e.name), d: e, depth: j.depth + 1})
	}
}
