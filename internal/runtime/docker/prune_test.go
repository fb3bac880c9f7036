package docker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A prune the engine refuses because another is running is asked again
// until it runs; any other error is returned at once, and so is the
// refusal once the caller's context ends.
func TestWhilePruneRunning(t *testing.T) {
	running := errors.New("Error response from daemon: a prune operation is already running")
	calls := 0
	got, err := whilePruneRunning(context.Background(), func() (int, error) {
		calls++
		if calls < 3 {
			return 0, running
		}
		return 42, nil
	})
	if err != nil || got != 42 || calls != 3 {
		t.Fatalf("after two refusals: %d, %v after %d calls, want 42 after 3", got, err, calls)
	}

	other := errors.New("Error response from daemon: something else")
	calls = 0
	if _, err := whilePruneRunning(context.Background(), func() (int, error) { calls++; return 0, other }); err != other || calls != 1 {
		t.Fatalf("another error: %v after %d calls, want it after 1", err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	done := make(chan error, 1)
	go func() {
		_, err := whilePruneRunning(ctx, func() (int, error) { calls++; return 0, running })
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if err != running {
			t.Fatalf("cancelled while refused: %v, want the refusal", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the retry did not end with its context")
	}
}
