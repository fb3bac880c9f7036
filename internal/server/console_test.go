package server

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestThrottle(t *testing.T) {
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	limit, window := 3, 100*time.Millisecond
	th := &throttle{now: func() time.Time { return now }, lines: func() (int, time.Duration) { return limit, window }}
	type res struct{ ok, first bool }
	var got []res
	for range 6 {
		ok, first := th.allow()
		got = append(got, res{ok, first})
	}
	want := []res{{true, false}, {true, false}, {true, false}, {false, true}, {false, false}, {false, false}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(res{})); diff != "" {
		t.Fatalf("first window (-want +got)\n%s", diff)
	}
	// A new window lets lines through again and allows one more notice.
	now = now.Add(window)
	for i := range 3 {
		if ok, _ := th.allow(); !ok {
			t.Fatalf("line %d of the second window refused", i)
		}
	}
	if ok, first := th.allow(); ok || !first {
		t.Fatalf("4th line of the second window: ok=%v first=%v", ok, first)
	}
	// Still inside the window: refused without a new notice.
	now = now.Add(window - time.Millisecond)
	if ok, first := th.allow(); ok || first {
		t.Fatalf("late line of the second window: ok=%v first=%v", ok, first)
	}
	// reset starts a fresh window at once.
	th.reset()
	if ok, _ := th.allow(); !ok {
		t.Fatal("refused after reset")
	}
	// Disabled (no limit): everything passes.
	limit = 0
	for range 100 {
		if ok, _ := th.allow(); !ok {
			t.Fatal("disabled throttle refused a line")
		}
	}
}

func TestRing(t *testing.T) {
	r := newRing(func() int { return 3 })
	if got := r.last(10); len(got) != 0 {
		t.Fatalf("empty ring: %q", got)
	}
	r.add("a")
	r.add("b")
	if diff := cmp.Diff([]string{"a", "b"}, r.last(10)); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff([]string{"b"}, r.last(1)); diff != "" {
		t.Error(diff)
	}
	r.add("c")
	r.add("d")
	r.add("e")
	if diff := cmp.Diff([]string{"c", "d", "e"}, r.last(10)); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff([]string{"d", "e"}, r.last(2)); diff != "" {
		t.Error(diff)
	}
	if got := r.last(0); len(got) != 0 {
		t.Errorf("last(0) = %q", got)
	}
	var buf bytes.Buffer
	for i := range 1000 {
		buf.WriteByte(byte('a' + i%26))
		r.add(buf.String()[i:])
	}
	if got := r.last(3); len(got) != 3 || got[2] != string(rune('a'+999%26)) {
		t.Errorf("after wrapping many times: %q", got)
	}
}

// A size change resizes the ring at the next use, keeping the newest lines.
func TestRingResize(t *testing.T) {
	size := 3
	r := newRing(func() int { return size })
	for _, l := range []string{"a", "b", "c", "d"} {
		r.add(l)
	}
	size = 5
	if diff := cmp.Diff([]string{"b", "c", "d"}, r.last(10)); diff != "" {
		t.Fatalf("after growing: %s", diff)
	}
	for _, l := range []string{"e", "f", "g"} {
		r.add(l)
	}
	if diff := cmp.Diff([]string{"c", "d", "e", "f", "g"}, r.last(10)); diff != "" {
		t.Fatalf("grown ring: %s", diff)
	}
	size = 2
	if diff := cmp.Diff([]string{"f", "g"}, r.last(10)); diff != "" {
		t.Fatalf("after shrinking: %s", diff)
	}
	r.add("h")
	if diff := cmp.Diff([]string{"g", "h"}, r.last(10)); diff != "" {
		t.Fatalf("shrunk ring: %s", diff)
	}
	size = 4 // grow from a full ring
	r.add("i")
	if diff := cmp.Diff([]string{"g", "h", "i"}, r.last(10)); diff != "" {
		t.Fatalf("regrown ring: %s", diff)
	}
}
