package server

import (
	"sync"
	"testing"

	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/runtime/runtimetest"
)

// A resource sample is never published after a status that its state
// contradicts: every stats event carries the state of the last status
// event before it. Samples are published as fast as possible while the
// state goes round (TestDockerEventsStartStop saw "starting" in the stats
// after "running" on a loaded machine).
func TestStatsFollowTheLastStatus(t *testing.T) {
	_, s := newFakeEnv(t, runtimetest.Process{})
	sub := s.Events().Subscribe(1 << 16)
	defer sub.Close()
	const cycles, samples = 300, 8000
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for range samples {
			select {
			case <-done:
				return
			default:
			}
			s.publishSample()
		}
	})
	for range cycles {
		for _, st := range []State{Starting, Running, Stopping, Offline} {
			if !s.setState(st) {
				t.Fatalf("transition to %s refused", st)
			}
		}
	}
	close(done)
	wg.Wait()
	if n := sub.Dropped(); n > 0 {
		t.Fatalf("%d events dropped: the check needs them all", n)
	}
	last, checked := Offline, 0
	for {
		select {
		case e := <-sub.C:
			switch e.Name {
			case events.Status:
				last = State(e.Args[0])
			case events.Stats:
				if u := decodeStats(t, e); u.State != last {
					t.Fatalf("a sample with state %s published after the status %s (%d samples checked before)", u.State, last, checked)
				}
				checked++
			}
		default:
			if checked < cycles {
				t.Fatalf("only %d samples checked", checked)
			}
			return
		}
	}
}
