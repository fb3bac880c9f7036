package fdwalk

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
)

// Item is an entry a walk reports to its fn: the entry as listed, the
// directory it was listed in (open while fn runs for it, so that the entry
// can be used by one system call relative to it) and the walk's owner,
// which the caller checks before it trusts an Item it is handed.
type Item struct {
	*Entry
	Dir   *Level
	Owner any
}

// Walker is a walk's configuration: what it reports to, and how it names
// the errors it meets.
type Walker struct {
	// Fn is called for every entry below the start, as fs.WalkDirFunc
	// (the caller reported the start itself): d is an *Item.
	Fn fs.WalkDirFunc
	// Owner is put in every Item.
	Owner any
	// Wrap converts an error met at rel (a directory that could not be
	// opened or listed, or the entry of it that could not be lstat-ed) into
	// the error Fn is given.
	Wrap func(rel string, err error) error
	// Moved is the error a walk fails with, without asking Fn, when the
	// directory rel it left to save descriptors moved before it could come
	// back to it: it can then not tell what it covered.
	Moved func(rel string) error
	// Tune says how Walk lists ahead.
	Tune Tuning
}

// Walk walks the directory top (the start, at rel, reported to fn as d by
// the caller) in lexical order, depth first, never following a link, with
// a bounded number of descriptors however deep the tree (Held), listing
// the next directories ahead on a second core (ahead.go). It closes top.
// fs.SkipDir and fs.SkipAll work as in fs.WalkDir, except that fs.SkipAll
// is returned (the caller makes it nil).
func (c *Walker) Walk(ctx context.Context, top *Level, rel string, d fs.DirEntry) error {
	w := &walker{c: c, ctx: ctx, buf: make([]byte, BufSize), stack: NewStack(top, Held, 1)}
	w.ahead.on, w.ahead.tune = true, c.Tune
	defer w.ahead.stop()
	defer w.stack.Close()
	return skipDirIsNil(w.walkEntries(top, 0, rel, d, nil, nil))
}

// walker is one sequential walk.
type walker struct {
	c     *Walker
	ctx   context.Context
	buf   []byte
	stack *Stack // the way from the start to the directory walked

	ahead lister // lists the next directories meanwhile (ahead.go)
}

// walkEntries walks the entries of the open directory dir (at depth below the
// start): listed here, when the lister has not listed them already (with
// kids, the first subdirectories).
func (w *walker) walkEntries(dir *Level, depth int, rel string, d fs.DirEntry, entries []*Entry, kids []*aheadJob) error {
	if entries == nil {
		var bad string
		var err error
		entries, bad, err = List(dir, w.buf)
		if err != nil {
			return skipDirIsNil(w.c.Fn(rel, d, w.c.Wrap(Join(rel, bad), err)))
		}
		w.ahead.listed += len(entries)
	}
	// Only through a descriptor that stays open while the entries are
	// walked (enter closes it beyond Held).
	a := aheadQueue{ls: &w.ahead, dirfd: dir.fd, depth: depth, entries: entries, next: len(entries)}
	if depth < Held {
		a.next = 0
		a.adopt(kids)
	}
	defer a.close()
	// One allocation for the directory's entries, not one each as an
	// interface value (a server has tens of thousands).
	items := make([]Item, len(entries))
	for i, e := range entries {
		a.fill(i)
		child := Join(rel, e.Base)
		it := &items[i]
		*it = Item{e, dir, w.c.Owner}
		j := a.at(i)
		err := w.c.Fn(child, it, nil)
		if err == nil && e.IsDir() {
			err = w.enter(dir, depth+1, child, it, j)
		} else if j != nil {
			w.ahead.drop(j)
		}
		if err == fs.SkipDir && !e.IsDir() {
			return nil // fs.WalkDir: the rest of this directory is skipped
		}
		if err != nil && err != fs.SkipDir {
			return err
		}
	}
	return nil
}

// enter walks the subdirectory it of parent, the top of the stack (j: its
// listing ahead, or nil). Beyond Held the parent's descriptor is closed
// meanwhile (Push) and reopened afterwards (Pop).
func (w *walker) enter(parent *Level, depth int, rel string, it *Item, j *aheadJob) error {
	if err := w.ctx.Err(); err != nil {
		if j != nil {
			w.ahead.drop(j)
		}
		return err
	}
	sub, err := Open(parent, it.Base, it.ID())
	if err != nil {
		if j != nil {
			w.ahead.drop(j)
		}
		return skipDirIsNil(w.c.Fn(rel, it, w.c.Wrap(rel, err)))
	}
	w.stack.Push(sub)
	entries, kids := w.ahead.take(j, sub, w.buf)
	if err := w.walkEntries(sub, depth, rel, it, entries, kids); err != nil {
		w.stack.Drop()
		return err
	}
	if err := w.stack.Pop(); err != nil {
		return w.c.Moved(parentOf(rel))
	}
	return nil
}

// WalkParallel is Walk with the directories listed by up to workers
// goroutines at once (joined before it returns): Fn is called concurrently
// and in no particular order, except that a directory is reported before
// its entries. Each worker walks a subtree deeper than Held on its own, as
// Walk does. fs.SkipDir returned for a directory skips it; fs.SkipAll or
// any other error stops the walk, and the first such error is returned.
// It closes top. It lists nothing ahead.
func (c *Walker) WalkParallel(ctx context.Context, top *Level, rel string, d fs.DirEntry, workers int) error {
	w := &parWalk{c: c, ctx: ctx}
	w.cond = sync.NewCond(&w.mu)
	w.push(parJob{dir: top, rel: rel, d: d})
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Go(w.work)
	}
	wg.Wait()
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}

// parJob is a directory to walk, at depth below the start: the entry d of
// parent, reported at rel, to be reported and opened by the worker that
// takes the job (release then drops the job's hold on parent, closed when
// its last subdirectory has opened itself); or, for the start, dir, already
// reported and open.
type parJob struct {
	parent  *Level
	release func()
	dir     *Level
	rel     string
	d       fs.DirEntry
	depth   int
}

type parWalk struct {
	c   *Walker
	ctx context.Context
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
	buf := make([]byte, BufSize)
	for {
		j, ok := w.next()
		if !ok {
			return
		}
		if dir := w.open(j); dir != nil {
			w.list(j, dir, buf)
			dir.Close()
		}
		w.done()
	}
}

// open reports the directory of j and opens it; nil when it is not to be
// walked (skipped, failed, or the walk is stopping).
func (w *parWalk) open(j parJob) *Level {
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
	if err := w.c.Fn(j.rel, j.d, nil); err != nil {
		w.fail(err)
		return nil
	}
	e := j.d.(*Item)
	dir, err := Open(j.parent, e.Base, e.ID())
	if err != nil {
		w.fail(w.c.Fn(j.rel, j.d, w.c.Wrap(j.rel, err)))
		return nil
	}
	return dir
}

// list reports the entries of the open directory dir of j and queues its
// subdirectories; below Held it walks them itself, as Walk does.
func (w *parWalk) list(j parJob, dir *Level, buf []byte) {
	if w.err.Load() != nil {
		return
	}
	if j.depth+1 >= Held {
		// The stack's start is dir, at j.depth: the levels before Held
		// stay open, as in Walk. Its caller closes dir.
		seq := &walker{c: w.c, ctx: w.ctx, buf: buf, stack: NewStack(dir, max(0, Held-j.depth), 1)}
		w.fail(seq.walkEntries(dir, j.depth, j.rel, j.d, nil, nil))
		return
	}
	entries, bad, err := List(dir, buf)
	if err != nil {
		w.fail(w.c.Fn(j.rel, j.d, w.c.Wrap(Join(j.rel, bad), err)))
		return
	}
	var subdirs []*Item
	for _, e := range entries {
		if e.IsDir() {
			subdirs = append(subdirs, &Item{e, dir, w.c.Owner})
			continue
		}
		if err := w.c.Fn(Join(j.rel, e.Base), &Item{e, dir, w.c.Owner}, nil); err != nil {
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
	held := &Level{fd: dir.fd, id: dir.id, known: dir.known, name: dir.name, up: dir.up}
	dir.fd = -1
	var holds atomic.Int64
	holds.Store(int64(len(subdirs)))
	release := func() {
		if holds.Add(-1) == 0 {
			held.Close()
		}
	}
	for _, e := range subdirs {
		e.Dir = held
		w.push(parJob{parent: held, release: release, rel: Join(j.rel, e.Base), d: e, depth: j.depth + 1})
	}
}

func skipDirIsNil(err error) error {
	if err == fs.SkipDir {
		return nil
	}
	return err
}

// Join is the name of base in the directory rel ("." is the start of the
// names).
func Join(rel, base string) string {
	switch {
	case base == ".":
		return rel
	case rel == ".":
		return base
	}
	return rel + "/" + base
}

// parentOf is the directory rel is in ("." for a single name).
func parentOf(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return "."
}
