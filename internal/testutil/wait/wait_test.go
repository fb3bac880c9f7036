package wait

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilHoldsOnceTheConditionDoes(t *testing.T) {
	var n atomic.Int32
	if !Until(time.Second, func() bool { return n.Add(1) >= 3 }) {
		t.Fatal("Until gave up on a condition that became true on the third poll")
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("polled %d times, want 3 (stop at the first true)", got)
	}
}

func TestUntilGivesUpAfterTheTimeout(t *testing.T) {
	start := time.Now()
	if Until(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("Until reported a condition that never held")
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Fatalf("gave up after %s, before the 50ms timeout", el)
	}
}

// recorder catches Fatalf so the failure path of For can be checked.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	panic(r)
}

func TestForNoErrorFailsWithTheLastError(t *testing.T) {
	r := &recorder{TB: t}
	defer func() {
		if recover() != r {
			t.Fatal("ForNoError did not fail the test")
		}
		if r.failed == "" {
			t.Fatal("no failure message")
		}
	}()
	ForNoError(r, 20*time.Millisecond, func() error { return errors.New("still down") }, "the node")
}
