package sftpd

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Issue 38 §1b: the garbage collector's pace while uploads run.
//
// An upload's bytes are allocated twice per 32 KiB write request, by
// libraries that let no caller supply the buffers: x/crypto/ssh copies
// every SSH packet it decrypts, pkg/sftp allocates every request's body.
// Both are large objects (> 32 KiB) freed at once. The daemon's live heap
// is small (a few MiB), so at GOGC=100 the collector runs every few MiB of
// that garbage, hundreds of cycles per GiB, and the scavenger gives the
// freed pages back to the kernel (madvise, a TLB shootdown on every CPU)
// only for the next requests to fault them in again: a third of the
// daemon's CPU in an upload.
//
// While an upload writes, the pacer raises the collector's percentage so
// that the heap may grow by about the headroom (system.sftp.
// upload_gc_headroom, MiB; 0 turns the pacer off) above what is live, and
// no further: GOGC = 100 × headroom / live, between 100 and maxUploadGOGC,
// computed again from the live heap every retuneEvery writes (so a heap
// that grows for other reasons during a long upload brings it back down
// towards 100). The memory this costs is thus bounded (about the
// headroom, the same for one upload or many), and it is given back:
// once no upload has written for uploadIdle, the percentage the process
// had before is restored, and with it the heap's usual size. An idle
// session or an open handle that is not written to costs nothing.
//
// The percentage is the process's (runtime/debug): the pacer raises it only
// when it is below its target (an operator's GOGC=400 or GOGC=off is left
// alone, and so is it when the boost would be smaller), and restores only
// a value it set itself (if something else changed it meanwhile, that
// value stays).

const (
	// maxUploadGOGC caps the percentage (a nearly empty heap).
	maxUploadGOGC = 1000
	// retuneEvery is the number of writes between two computations of
	// the percentage from the live heap (2 MiB of 32 KiB requests).
	retuneEvery = 64
	// uploadIdle is how long after the last write the boost ends.
	uploadIdle = 2 * time.Second
)

// gcPacer raises the collector's percentage while uploads write.
type gcPacer struct {
	// headroom is how far above the live heap the collector lets the
	// heap grow while uploads run (system.sftp.upload_gc_headroom); 0:
	// the percentage is never touched.
	headroom func() uint64
	idle     time.Duration
	// setPercent and liveHeap are runtime/debug's SetGCPercent and the
	// live heap of runtime/metrics (tests replace them).
	setPercent func(int) int
	liveHeap   func() uint64

	writes    atomic.Uint64
	lastWrite atomic.Int64 // UnixNano of the latest write
	active    atomic.Bool  // uploads are writing: tuned, the idle check armed

	mu      sync.Mutex
	set     int // the percentage this pacer set; 0 when none
	prev    int // the percentage before it
	timer   *time.Timer
	stopped bool
}

func newGCPacer(headroom func() uint64) *gcPacer {
	return &gcPacer{
		headroom: headroom, idle: uploadIdle,
		setPercent: debug.SetGCPercent, liveHeap: liveHeapBytes,
	}
}

// liveHeapBytes is the heap that survived the latest collection.
func liveHeapBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// target is the percentage that lets the heap grow by headroom above live
// (between 100 and maxUploadGOGC); 0 when the headroom is 0.
func (p *gcPacer) target(headroom, live uint64) int {
	switch {
	case headroom == 0:
		return 0
	case live == 0:
		return maxUploadGOGC
	}
	return int(min(maxUploadGOGC, max(100, 100*headroom/live)))
}

// wrote notes one upload write: the first after a pause tunes the
// percentage, and then every retuneEvery-th.
func (p *gcPacer) wrote() {
	if p == nil {
		return
	}
	p.lastWrite.Store(time.Now().UnixNano())
	n := p.writes.Add(1)
	if p.active.Load() && n%retuneEvery != 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tune()
}

// tune sets the percentage for the live heap now. p.mu is held.
func (p *gcPacer) tune() {
	if p.stopped {
		return
	}
	if !p.active.Load() {
		p.active.Store(true)
		p.armLocked()
	}
	want := p.target(p.headroom(), p.liveHeap())
	if p.set == 0 {
		if want == 0 {
			return
		}
		cur := p.setPercent(want)
		if cur < 0 || cur >= want {
			p.setPercent(cur) // off, or already as high: not ours to change
			return
		}
		p.prev, p.set = cur, want
		return
	}
	switch {
	case want <= p.prev:
		p.restoreLocked() // the heap has grown: no boost needed
	case want != p.set:
		if cur := p.setPercent(want); cur != p.set {
			p.setPercent(cur) // changed by someone else: theirs stays
			p.set, p.prev = 0, 0
			return
		}
		p.set = want
	}
}

// armLocked starts the idle check. p.mu is held.
func (p *gcPacer) armLocked() {
	if p.timer == nil {
		p.timer = time.AfterFunc(p.idle, p.check)
		return
	}
	p.timer.Reset(p.idle)
}

// check ends the boost once no upload has written for p.idle.
func (p *gcPacer) check() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.active.Load() || p.stopped {
		return
	}
	since := time.Since(time.Unix(0, p.lastWrite.Load()))
	if since < p.idle {
		p.timer.Reset(p.idle - since)
		return
	}
	if p.set != 0 {
		p.restoreLocked()
	}
	p.active.Store(false)
}

// restoreLocked gives the process its percentage back, unless something
// else changed it since the pacer set it. p.mu is held.
func (p *gcPacer) restoreLocked() {
	if cur := p.setPercent(p.prev); cur != p.set {
		p.setPercent(cur)
	}
	p.set, p.prev = 0, 0
}

// stop ends the boost for good (the server is closing).
func (p *gcPacer) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.set != 0 {
		p.restoreLocked()
	}
}
