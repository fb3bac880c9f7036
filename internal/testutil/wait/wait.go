// Package wait is the one way tests wait for something to happen: poll a
// condition until it holds or a deadline passes. Tests never sleep a fixed
// time where a condition can be waited on.
package wait

import (
	"fmt"
	"testing"
	"time"
)

// poll is how often a condition is re-checked: short enough that a test
// never waits noticeably longer than the thing it waits for.
const poll = 10 * time.Millisecond

// For polls cond until it returns true, and fails the test (naming what it
// waited for) when timeout passes first.
func For(t testing.TB, timeout time.Duration, cond func() bool, what string, args ...any) {
	t.Helper()
	if !Until(timeout, cond) {
		t.Fatalf("waited %s for %s", timeout, fmt.Sprintf(what, args...))
	}
}

// ForNoError polls f until it returns nil, and fails the test with the last
// error when timeout passes first.
func ForNoError(t testing.TB, timeout time.Duration, f func() error, what string, args ...any) {
	t.Helper()
	var last error
	if !Until(timeout, func() bool { last = f(); return last == nil }) {
		t.Fatalf("waited %s for %s: last error: %v", timeout, fmt.Sprintf(what, args...), last)
	}
}

// Until polls cond until it returns true or timeout passes, and reports
// whether it held. For tests that must decide what a timeout means.
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(poll)
	}
}
