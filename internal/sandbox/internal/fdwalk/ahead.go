package fdwalk

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Listing ahead: while a walk's fn handles the entries of one directory,
// a second goroutine (the lister) lists the next subdirectories of the
// walk (getdents and one fstatat per entry, most of a large walk's time),
// so that on two cores the listing overlaps the rest of the walk. The walk
// itself is unchanged: it still opens each directory by name when it
// enters it, checking its identity against the parent's listing, and
// reports the same entries in the same order; it only takes the lister's
// entries instead of listing again when the directory it opened is the
// one listed (same inode) and unchanged since (same ctime, which every
// added, removed or renamed entry moves). Changes to a listed file's own
// data are not seen by that check: its lstat data may be a few
// milliseconds older than a listing made on entering would be, as the
// listing of a large directory's last entries always was.
//
// With a directory it lists, the lister lists its first subdirectories
// (listKids): in a tree of directories of directories the walk would
// otherwise enter one and need its first subdirectory at once, before the
// lister could have listed it, and list most directories itself.
//
// Bounds: at most AheadPerDir subdirectories of one directory and
// aheadJobs in all (plus the subdirectories listed with them, at most
// AheadPerDir and tune.KidEntries entries a job) are listed ahead and not
// yet entered (their entries only: a directory listed ahead is closed
// once listed), so listing ahead holds at most three descriptors beyond
// the walk's own (the lister's two, a job's and one of its
// subdirectories', and the walk's while it lists a job itself rather than
// wait, see take). Only
// subdirectories of directories whose descriptor the walk holds anyway
// (depth below Held) are listed ahead, through that descriptor. A walk of fewer than
// tune.After entries starts no goroutine; the lister is joined before the
// walk returns.

// aheadJobs is how many subdirectories a walk lists ahead at most, and
// AheadPerDir how many of one directory (so that the subdirectories of
// the one the walk is in are not held back by those of its parents, which
// it enters much later).
const (
	aheadJobs   = 32
	AheadPerDir = 4
)

// Tuning is how a walk lists ahead: a field of the sandbox's state (tests
// set their own), not package variables (ARCHITECTURE.md rule 1).
type Tuning struct {
	// After is how many entries a walk lists before it starts the
	// lister (a small tree is walked without a goroutine).
	After int
	// Settled is how long a directory must have been unchanged for
	// its listing ahead to be used: a ctime moves only once per clock tick
	// of the file system, so a directory changed in the tick of its
	// listing could change again unseen.
	Settled time.Duration
	// KidEntries bounds the entries of the subdirectories listed with
	// one job (memory: a directory of a million files is left to the walk).
	KidEntries int
	// Used, when set (by tests), is called at the end of a walk with
	// how many listings ahead it used; Listed by the lister after
	// each directory it listed.
	Used   func(n int)
	Listed func()
	// Now, when set (by tests), is the clock of the Settled check, so
	// that a test decides what is recent instead of the machine's load.
	Now func() time.Time
}

// DefaultTuning is the listing ahead of a sandbox's walks.
func DefaultTuning() Tuning {
	return Tuning{After: 2048, Settled: 100 * time.Millisecond, KidEntries: 8192}
}

// Job states: queued for the lister, being listed, taken by the walk.
const (
	jobQueued int32 = iota
	jobListing
	jobTaken
)

// aheadJob is a subdirectory (name, listed with identity id) of a
// directory the walk holds open as dirfd, to be listed by the lister.
type aheadJob struct {
	q     *aheadQueue // the directory's queue it is in
	dirfd int
	name  string
	id    Inode
	state atomic.Int32
	done  chan struct{} // closed by the lister once it listed the job

	// kidsOK says the walk lists the subdirectories of this one ahead
	// too (it is above Held): the lister lists the first ones with
	// it (kids).
	kidsOK bool
	tune   *Tuning // the walk's

	// Set by the lister before done is closed.
	ok      bool
	ctime   unix.Timespec
	entries []*Entry
	kids    []*aheadJob // listed, in the order of entries
}

// lister is a walk's listing-ahead goroutine and the walk's account of it
// (touched by the walk's goroutine only, except jobs).
type lister struct {
	jobs    chan *aheadJob
	wg      sync.WaitGroup
	pending int // jobs submitted and not yet taken or dropped
	listed  int // entries the walk listed itself, until the lister starts
	used    int
	on      bool // set by Walk (a walk WalkParallel runs has no lister)
	off     bool
	tune    Tuning // set by Walk with on
}

// canSubmit reports whether the walk may hand one more directory to the
// lister, starting it once the walk proved large enough.
func (ls *lister) canSubmit() bool {
	if !ls.on || ls.off {
		return false
	}
	if ls.jobs == nil {
		if ls.listed < ls.tune.After {
			return false
		}
		if runtime.GOMAXPROCS(0) < 2 {
			ls.off = true
			return false
		}
		ls.jobs = make(chan *aheadJob, 2*aheadJobs)
		ls.wg.Go(ls.run)
	}
	// The walk is the only sender: a send with room never blocks (a job
	// taken by the walk stays in the channel until the lister skips it).
	return ls.pending < aheadJobs && len(ls.jobs) < cap(ls.jobs)
}

func (ls *lister) submit(q *aheadQueue, e *Entry) *aheadJob {
	j := &aheadJob{q: q, dirfd: q.dirfd, name: e.Base, id: e.ID(), done: make(chan struct{}), kidsOK: q.depth+1 < Held, tune: &ls.tune}
	ls.pending++
	ls.jobs <- j
	return j
}

// take ends j for the walk, which has opened its directory as sub: the
// lister's entries when they are sub's as it is now, with the
// subdirectories listed with them (kids, for the walk's queue of sub),
// else nil (the walk lists sub itself, as without the lister). While the
// lister is still listing j, the walk lists later jobs of the same
// directory itself (with buf) rather than wait.
func (ls *lister) take(j *aheadJob, sub *Level, buf []byte) ([]*Entry, []*aheadJob) {
	if j == nil {
		return nil, nil
	}
	ls.pending--
	if j.state.CompareAndSwap(jobQueued, jobTaken) {
		return nil, nil // not started: listing it here is as quick
	}
	for waiting := true; waiting; {
		select {
		case <-j.done:
			waiting = false
		default:
			if k := j.q.lastQueued(); k != nil {
				k.list(buf)
				close(k.done)
			} else {
				<-j.done
				waiting = false
			}
		}
	}
	if !j.ok || j.ctime != sub.ctime {
		return nil, nil
	}
	ls.used++
	return j.entries, j.kids
}

// drop ends j, which the walk does not enter (skipped, or the walk ends).
func (ls *lister) drop(j *aheadJob) {
	ls.pending--
	if !j.state.CompareAndSwap(jobQueued, jobTaken) {
		<-j.done
	}
}

// stop joins the lister; every job was taken or dropped before.
func (ls *lister) stop() {
	if ls.jobs != nil {
		close(ls.jobs)
		ls.wg.Wait()
	}
	if ls.tune.Used != nil {
		ls.tune.Used(ls.used)
	}
}

func (ls *lister) run() {
	buf := make([]byte, BufSize)
	for j := range ls.jobs {
		if j.state.CompareAndSwap(jobQueued, jobListing) {
			j.list(buf)
			close(j.done)
			if ls.tune.Listed != nil {
				ls.tune.Listed()
			}
		}
	}
}

// list lists j's directory, if it is the one the walk listed and it has
// been unchanged for tune.Settled. Failures leave j not ok: the walk then
// lists the directory itself and reports what fails as without the lister.
func (j *aheadJob) list(buf []byte) {
	now := time.Now()
	if j.tune.Now != nil {
		now = j.tune.Now()
	}
	fd, err := Openat(j.dirfd, j.name, DirFlags)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || (Inode{uint64(st.Dev), st.Ino}) != j.id {
		return
	}
	if now.Sub(time.Unix(st.Ctim.Unix())) < j.tune.Settled {
		return
	}
	entries, _, err := listFD(fd, buf)
	if err != nil {
		return
	}
	j.ok, j.ctime, j.entries = true, st.Ctim, entries
	if j.kidsOK {
		j.kids = listKids(fd, entries, buf, j.tune)
	}
}

// listKids lists the first subdirectories among entries, those of the
// directory open as fd, while the walk is still elsewhere: without them
// the walk enters a directory of directories and needs its first
// subdirectory at once, before the lister could list it. Each is a job
// listed as any other (same identity and settling checks); the walk
// takes them with their parent's entries (take) into its queue for the
// parent (aheadQueue.adopt).
func listKids(fd int, entries []*Entry, buf []byte, tune *Tuning) []*aheadJob {
	var kids []*aheadJob
	budget := tune.KidEntries
	for _, e := range entries {
		if len(kids) == AheadPerDir || budget <= 0 {
			break
		}
		if !e.IsDir() {
			continue
		}
		k := &aheadJob{dirfd: fd, name: e.Base, id: e.ID(), done: make(chan struct{}), tune: tune}
		k.state.Store(jobListing)
		k.list(buf)
		k.dirfd = -1
		close(k.done)
		if tune.Listed != nil {
			tune.Listed()
		}
		if budget -= len(k.entries); !k.ok || budget < 0 {
			break
		}
		kids = append(kids, k)
	}
	return kids
}

// aheadQueue is one directory's jobs, in the order of its entries.
type aheadQueue struct {
	ls      *lister
	dirfd   int
	depth   int // of the directory, below the start of the walk
	entries []*Entry
	next    int // the next entry to consider submitting
	q       []queued
}

// adopt queues the subdirectories the lister listed with the directory's
// entries (take), as if submitted (they are listed already).
func (a *aheadQueue) adopt(kids []*aheadJob) {
	for _, k := range kids {
		for a.next < len(a.entries) && (a.entries[a.next].Base != k.name || !a.entries[a.next].IsDir()) {
			a.next++
		}
		if a.next == len(a.entries) {
			return // not among the entries: dropped, as a job never submitted
		}
		k.q = a
		a.ls.pending++
		a.q = append(a.q, queued{a.next, k})
		a.next++
	}
}

type queued struct {
	i int
	j *aheadJob
}

// fill submits the subdirectories after entry i (the one the walk is at:
// too late for it) while there is room.
func (a *aheadQueue) fill(i int) {
	a.next = max(a.next, i+1)
	for a.next < len(a.entries) && len(a.q) < AheadPerDir && a.ls.canSubmit() {
		if e := a.entries[a.next]; e.IsDir() {
			a.q = append(a.q, queued{a.next, a.ls.submit(a, e)})
		}
		a.next++
	}
}

// lastQueued returns the last job of the queue that nobody has started,
// marked as being listed by the caller; nil when there is none.
func (a *aheadQueue) lastQueued() *aheadJob {
	for i := len(a.q) - 1; i >= 0; i-- {
		if j := a.q[i].j; j.state.CompareAndSwap(jobQueued, jobListing) {
			return j
		}
	}
	return nil
}

// at returns the job of entry i (nil when there is none), which the
// caller takes or drops.
func (a *aheadQueue) at(i int) *aheadJob {
	if len(a.q) == 0 || a.q[0].i != i {
		return nil
	}
	j := a.q[0].j
	a.q = a.q[1:]
	return j
}

// close drops the jobs of entries the walk did not reach.
func (a *aheadQueue) close() {
	for _, q := range a.q {
		a.ls.drop(q.j)
	}
	a.q = nil
}
