package chunkstore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when its tests leave a goroutine behind
// (ARCHITECTURE.md rule 2): writers, readers and the store's own
// goroutines are joined by their Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Close joins the goroutine a commit starts to drop its pins: none is
// left once it returns (rule 2).
func TestCloseJoinsTheStoresGoroutines(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent()
	w := s.NewWriter("srv", "b0")
	if _, err := w.Write(tarOf(t, randomFiles(4, 64<<10, 1))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.mu.Lock()
	unpins := s.unpins
	s.mu.Unlock()
	if unpins != 0 {
		t.Fatalf("Close returned with %d pin drops running", unpins)
	}
	goleak.VerifyNone(t, before)
}
