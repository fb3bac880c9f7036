package sandbox

import (
	"context"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
)

// WalkParallel is WalkContext with the directories listed by up to workers
// goroutines at once: fn is called concurrently and in no particular order,
// except that a directory is reported before its entries. Links are never
// followed and a directory swapped for something else is skipped, as in
// Walk. fs.SkipDir returned for a directory skips it; fs.SkipAll or any
// other error stops the walk, and the first such error is returned
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
	if !d.IsDir() {
		return skipAllIsNil(fn(rel, d, nil))
	}
	w := &parWalk{s: f.s, ctx: ctx, fn: fn}
	w.cond = sync.NewCond(&w.mu)
	w.push(parJob{parent: f.s.root, release: func() {}, base: rel, rel: rel, d: d})
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

// parJob is a directory to list: base in parent, reported at rel. release
// drops the job's hold on parent (closed when its last child has opened
// itself).
type parJob struct {
	parent  *os.Root
	release func()
	base    string
	rel     string
	d       fs.DirEntry
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

func (w *parWalk) fail(err error) { w.err.CompareAndSwap(nil, &err) }

func (w *parWalk) work() {
	for {
		j, ok := w.next()
		if !ok {
			return
		}
		w.list(j)
		w.done()
	}
}

// list reports the directory of j and its entries, and queues its
// subdirectories.
func (w *parWalk) list(j parJob) {
	if w.err.Load() != nil {
		j.release()
		return
	}
	if err := w.ctx.Err(); err != nil {
		j.release()
		w.fail(err)
		return
	}
	if err := w.fn(j.rel, j.d, nil); err != nil {
		j.release()
		if err != fs.SkipDir {
			w.fail(err)
		}
		return
	}
	sub, dir, entries, err := openDir(j.parent, j.base, j.d)
	j.release()
	if err != nil {
		if err := w.fn(j.rel, j.d, wrap("walk", j.rel, err)); err != nil && err != fs.SkipDir {
			w.fail(err)
		}
		return
	}
	var subdirs []fs.DirEntry
	for _, e := range entries {
		if e.IsDir() {
			subdirs = append(subdirs, e)
			continue
		}
		if err := w.fn(w.child(j.rel, e.Name()), walkEntry{e, sub, dir, w.s}, nil); err != nil && err != fs.SkipDir {
			w.fail(err)
			break
		}
	}
	if len(subdirs) == 0 || w.err.Load() != nil {
		_ = dir.Close()
		_ = sub.Close()
		return
	}
	var holds atomic.Int64
	holds.Store(int64(len(subdirs)))
	release := func() {
		if holds.Add(-1) == 0 {
			_ = dir.Close()
			_ = sub.Close()
		}
	}
	for _, e := range subdirs {
		w.push(parJob{parent: sub, release: release, base: e.Name(), rel: w.child(j.rel, e.Name()), d: walkEntry{e, sub, dir, w.s}})
	}
}

func (w *parWalk) child(rel, name string) string {
	if rel == "." {
		return name
	}
	return rel + "/" + name
}
