package sftpd

import (
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/testutil/wait"
)

// fakeGC stands for the runtime's collector percentage and live heap.
type fakeGC struct {
	mu      sync.Mutex
	percent int
	live    uint64
	sets    int
}

func (g *fakeGC) setPercent(v int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.percent
	g.percent = v
	g.sets++
	return old
}

func (g *fakeGC) liveHeap() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.live
}

func (g *fakeGC) get() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.percent
}

func (g *fakeGC) setLive(v uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.live = v
}

func testPacer(g *fakeGC, idle time.Duration) *gcPacer {
	p := newGCPacer(func() uint64 { return 32 << 20 })
	p.idle, p.setPercent, p.liveHeap = idle, g.setPercent, g.liveHeap
	return p
}

func TestGCPacerTarget(t *testing.T) {
	p := newGCPacer(nil)
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, maxUploadGOGC},
		{1 << 20, maxUploadGOGC}, // 3200 %, capped
		{4 << 20, 800},           // 32 MiB of headroom over 4 MiB
		{8 << 20, 400},
		{32 << 20, 100},
		{1 << 30, 100}, // a large heap: the default pace already leaves room
	} {
		if got := p.target(32<<20, c.live); got != c.want {
			t.Errorf("target(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
	}
	if got := p.target(0, 4<<20); got != 0 {
		t.Errorf("target with no headroom = %d, want 0", got)
	}
}

// With no headroom configured the percentage is never touched.
func TestGCPacerOff(t *testing.T) {
	g := &fakeGC{percent: 100, live: 4 << 20}
	p := testPacer(g, time.Millisecond)
	p.headroom = func() uint64 { return 0 }
	for range 3 * retuneEvery {
		p.wrote()
	}
	p.stop()
	if g.sets != 0 {
		t.Fatalf("the percentage was set %d times", g.sets)
	}
}

// While uploads write, the percentage is raised for the live heap; once
// they stop for the idle time, the process's own is back.
func TestGCPacerBoostsWhileWritingThenRestores(t *testing.T) {
	g := &fakeGC{percent: 100, live: 4 << 20}
	p := testPacer(g, 20*time.Millisecond)
	defer p.stop()
	p.wrote()
	if got := g.get(); got != 800 {
		t.Fatalf("percentage while writing = %d, want 800", got)
	}
	// The live heap grows (other work): the next retune brings it down.
	g.setLive(16 << 20)
	for range retuneEvery {
		p.wrote()
	}
	if got := g.get(); got != 200 {
		t.Fatalf("percentage after the heap grew = %d, want 200", got)
	}
	// Grown past the headroom: the default pace leaves room enough.
	g.setLive(64 << 20)
	for range retuneEvery {
		p.wrote()
	}
	if got := g.get(); got != 100 {
		t.Fatalf("percentage after the heap grew past the headroom = %d, want 100", got)
	}
	g.setLive(4 << 20)
	for range retuneEvery {
		p.wrote()
	}
	if got := g.get(); got != 800 {
		t.Fatalf("percentage after the heap shrank = %d, want 800", got)
	}
	wait.For(t, 10*time.Second, func() bool { return g.get() == 100 }, "the percentage back to 100 after the uploads stopped (now %d)", g.get())
	// A new upload raises it again.
	g.setLive(4 << 20)
	p.wrote()
	if got := g.get(); got != 800 {
		t.Fatalf("percentage at the next upload = %d, want 800", got)
	}
}

// An operator's higher percentage, or a collector turned off, is left as
// it is, during and after the uploads.
func TestGCPacerLeavesAHigherOrOffPercentage(t *testing.T) {
	for _, start := range []int{-1, 800, 2000} {
		g := &fakeGC{percent: start, live: 4 << 20}
		p := testPacer(g, time.Millisecond)
		for range 3 * retuneEvery {
			p.wrote()
		}
		if got := g.get(); got != start {
			t.Errorf("GOGC %d: percentage while writing = %d", start, got)
		}
		p.stop()
		if got := g.get(); got != start {
			t.Errorf("GOGC %d: percentage after = %d", start, got)
		}
	}
}

// A percentage something else set during the boost is not overwritten by
// the restore.
func TestGCPacerRestoresOnlyItsOwnValue(t *testing.T) {
	g := &fakeGC{percent: 100, live: 4 << 20}
	p := testPacer(g, 20*time.Millisecond)
	defer p.stop()
	p.wrote()
	g.setPercent(150)
	wait.For(t, 10*time.Second, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.set == 0
	}, "the boost to end")
	if got := g.get(); got != 150 {
		t.Fatalf("percentage = %d, want the 150 set meanwhile", got)
	}
}

// stop restores at once, and no later write raises it again.
func TestGCPacerStop(t *testing.T) {
	g := &fakeGC{percent: 100, live: 4 << 20}
	p := testPacer(g, time.Hour)
	p.wrote()
	if got := g.get(); got != 800 {
		t.Fatalf("percentage while writing = %d, want 800", got)
	}
	p.stop()
	if got := g.get(); got != 100 {
		t.Fatalf("percentage after stop = %d, want 100", got)
	}
	sets := g.sets
	p.wrote()
	if got := g.get(); got != 100 || g.sets != sets {
		t.Fatalf("a write after stop changed the percentage: %d (%d calls)", got, g.sets-sets)
	}
}

// The real runtime: the percentage rises with a write and is the process's
// own again after stop.
func TestGCPacerRuntime(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	p := newGCPacer(func() uint64 { return 32 << 20 })
	p.wrote()
	raised := debug.SetGCPercent(-1)
	debug.SetGCPercent(raised)
	if raised <= 100 {
		t.Fatalf("percentage while writing = %d, want above 100", raised)
	}
	p.stop()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("percentage after stop = %d, want 100", got)
	}
}
