package server

import (
	"slices"
	"sync"
	"testing"

	"github.com/wharf/wharf/internal/events"
)

// TestStateChangesPublishedInTheirOrder: a stop's "stopping" and the
// exit watcher's "offline", made at the same moment, reach subscribers in
// the order the state machine took them. Otherwise a socket could see
// "offline" then "stopping" and show a stopped server as stopping
// (seen once in TestWebsocketConsole under load).
func TestStateChangesPublishedInTheirOrder(t *testing.T) {
	_, s, _ := hungServer(t)
	for i := 0; i < 300; i++ {
		s.setState(Starting)
		s.setState(Running)
		sub := s.Events().Subscribe(16)
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() { defer wg.Done(); <-start; s.setState(Stopping) }()
		go func() { defer wg.Done(); <-start; s.setState(Offline) }()
		close(start)
		wg.Wait()
		var got []string
		for len(sub.C) > 0 {
			if e := <-sub.C; e.Name == events.Status {
				got = append(got, e.Args[0])
			}
		}
		sub.Close()
		if s.State() != Offline {
			t.Fatalf("round %d: state %s", i, s.State())
		}
		if !slices.Equal(got, []string{"stopping", "offline"}) && !slices.Equal(got, []string{"offline"}) {
			t.Fatalf("round %d: published %v with the state offline", i, got)
		}
	}
}
