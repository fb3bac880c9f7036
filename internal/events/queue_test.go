package events

import (
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/testutil/wait"
)

func TestEncodeWireShape(t *testing.T) {
	for e, want := range map[*Event]string{
		{Name: "auth success"}:                       `{"event":"auth success","args":[]}`,
		{Name: ConsoleOutput, Args: []string{"<b>"}}: `{"event":"console output","args":["\u003cb\u003e"]}`,
	} {
		if got := string(Encode(*e).Data); got != want {
			t.Errorf("Encode(%v) = %s, want %s", *e, got, want)
		}
	}
}

// Every queue receives the same encoded bytes: one encoding per event.
func TestQueuesShareOneEncoding(t *testing.T) {
	b := NewBus()
	limit := func() int { return 10 }
	q1, q2 := NewQueue(limit, nil, nil), NewQueue(limit, nil, nil)
	b.Attach(q1)
	b.Attach(q2)
	b.Publish(New(ConsoleOutput, "x"))
	f1, f2 := q1.Take(nil), q2.Take(nil)
	if len(f1) != 1 || len(f2) != 1 || &f1[0].Data[0] != &f2[0].Data[0] {
		t.Fatalf("frames not shared: %v %v", f1, f2)
	}
	var m Event
	if json.Unmarshal(f1[0].Data, &m) != nil || m.Name != ConsoleOutput || m.Args[0] != "x" {
		t.Fatalf("frame %s", f1[0].Data)
	}
}

// A queue keeps order, grows on demand, drops what passes its live limit,
// reports since when it is full, and holds nothing once trimmed.
func TestQueueLimitOrderAndTrim(t *testing.T) {
	b := NewBus()
	var limit atomic.Int64
	limit.Store(3)
	notified := 0
	q := NewQueue(func() int { return int(limit.Load()) }, func(name string) bool { return name != InstallOutput }, func() { notified++ })
	if !b.Attach(q, Encode(New("first"))) {
		t.Fatal("attach refused")
	}
	if q.Len() != 1 || notified != 1 {
		t.Fatalf("len %d notified %d after attach", q.Len(), notified)
	}
	for _, n := range []string{"a", InstallOutput, "b", "c", "d"} {
		b.Publish(New(n))
	}
	if q.Dropped() != 2 || q.FullFor() == 0 && q.Len() != 3 {
		t.Fatalf("dropped %d, len %d", q.Dropped(), q.Len())
	}
	// The owner's own frames pass the limit.
	q.Put(Encode(New("own")))
	// A larger limit applies to the queue at once.
	limit.Store(10)
	if q.FullFor() != 0 {
		t.Fatal("still full under the larger limit")
	}
	b.Publish(New("e"))
	var names []string
	for _, f := range q.Take(nil) {
		names = append(names, f.Name)
	}
	if got := len(names); got != 5 || names[0] != "first" || names[1] != "a" || names[2] != "b" || names[3] != "own" || names[4] != "e" {
		t.Fatalf("frames %v", names)
	}
	if notified != 1 {
		t.Fatalf("notified %d times; want once, when the queue stopped being empty", notified)
	}
	b.Publish(New("f"))
	if notified != 2 {
		t.Fatalf("not notified after a take emptied the queue")
	}
	q.Take(nil)
	q.Trim()
	if q.frames != nil {
		t.Fatal("an empty trimmed queue keeps storage")
	}
	q.Detach()
	b.Publish(New("g"))
	if q.Len() != 0 || b.Subscribers() != 0 {
		t.Fatal("a detached queue still receives")
	}
}

func TestQueueFullFor(t *testing.T) {
	b := NewBus()
	q := NewQueue(func() int { return 1 }, nil, nil)
	b.Attach(q)
	b.Publish(New("a"))
	b.Publish(New("b"))
	wait.For(t, 5*time.Second, func() bool { return q.FullFor() >= 20*time.Millisecond }, "the queue to count 20ms full")
	q.Take(nil)
	if q.FullFor() != 0 {
		t.Fatal("full after the owner took everything")
	}
}

func TestQueueGoneWhenBusCloses(t *testing.T) {
	b := NewBus()
	notified := false
	q := NewQueue(func() int { return 1 }, nil, func() { notified = true })
	b.Attach(q)
	b.Close()
	if !q.Gone() || !notified {
		t.Fatalf("gone %v notified %v", q.Gone(), notified)
	}
	if b.Attach(NewQueue(func() int { return 1 }, nil, nil)) {
		t.Fatal("attached to a closed bus")
	}
}

// frameTexts returns the console lines of frames ("<marker>" for a skipped-lines
// marker, with its count) and the names of the other events, in order.
func frameTexts(t *testing.T, fs []Frame) []string {
	t.Helper()
	var out []string
	for _, f := range fs {
		var e Event
		if err := json.Unmarshal(f.Data, &e); err != nil {
			t.Fatalf("frame %q: %v", f.Data, err)
		}
		switch {
		case e.Name != ConsoleOutput:
			out = append(out, "event:"+e.Name)
		default:
			out = append(out, e.Args[0])
		}
	}
	return out
}

func sameTexts(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}

// Issue 38: a full queue makes room by dropping its oldest console line
// (not the newest, which must reach the client), and the next take puts a
// marker with the count where they were. Other events are not dropped for
// a console line; with no console line queued, the new frame is dropped.
func TestQueueFullDropsOldestConsoleLine(t *testing.T) {
	b := NewBus()
	q := NewQueue(func() int { return 3 }, nil, nil)
	b.Attach(q)
	b.Publish(New(Status, "running"))
	for _, l := range []string{"1", "2", "3", "4", "5"} {
		b.Publish(New(ConsoleOutput, l))
	}
	sameTexts(t, frameTexts(t, q.Take(nil)), "event:status", SkippedText(3), "4", "5")
	if q.Dropped() != 3 {
		t.Fatalf("dropped %d", q.Dropped())
	}
	// Nothing left to report: the next take has no marker.
	b.Publish(New(ConsoleOutput, "6"))
	sameTexts(t, frameTexts(t, q.Take(nil)), "6")
	// No console line to drop: the offered frame is.
	for _, n := range []string{"a", "b", "c", "d"} {
		b.Publish(New(n))
	}
	sameTexts(t, frameTexts(t, q.Take(nil)), "event:a", "event:b", "event:c")
	// A console line in the middle of other events is the one dropped.
	for _, n := range []Event{New("x"), New(ConsoleOutput, "7"), New("y"), New("z")} {
		b.Publish(n)
	}
	// (no console line left: the marker comes last)
	sameTexts(t, frameTexts(t, q.Take(nil)), "event:x", "event:y", "event:z", SkippedText(1))
}

// A long overflow neither grows the queue's storage past a bound nor loses
// the order of what it keeps, and the marker counts every line dropped.
func TestQueueOverflowStorageBounded(t *testing.T) {
	b := NewBus()
	q := NewQueue(func() int { return 10 }, nil, nil)
	b.Attach(q)
	for i := range 10000 {
		b.Publish(New(ConsoleOutput, strconv.Itoa(i)))
	}
	q.mu.Lock()
	c := cap(q.frames)
	q.mu.Unlock()
	if c > 64 {
		t.Fatalf("storage of %d frames for a limit of 10", c)
	}
	got := frameTexts(t, q.Take(nil))
	kept := len(got) - 1
	if kept < 8 || kept > 10 || got[0] != SkippedText(10000-kept) {
		t.Fatalf("got %q", got)
	}
	for i, l := range got[1:] {
		if l != strconv.Itoa(10000-kept+i) {
			t.Fatalf("got %q", got)
		}
	}
}

// TakeRecent skips the console lines published before the cutoff, keeps
// the newest keep lines whatever their age, never skips other events or
// kept lines (the daemon's notices), and puts one marker with the count in
// front of the first console line it keeps. PublishAll delivers a burst at once.
func TestTakeRecentSkipsOldLines(t *testing.T) {
	b := NewBus()
	wakes := 0
	q := NewQueue(func() int { return 100 }, nil, func() { wakes++ })
	b.Attach(q)
	var burst []Event
	for i := range 10 {
		burst = append(burst, New(ConsoleOutput, strconv.Itoa(i)))
		if i == 4 {
			burst = append(burst, New(Status, "running"))
			notice := New(ConsoleOutput, "notice")
			notice.Kept = true
			burst = append(burst, notice)
		}
	}
	b.PublishAll(burst)
	if wakes != 1 || q.Len() != 12 {
		t.Fatalf("%d wake-ups, %d frames for a burst of 12", wakes, q.Len())
	}
	cutoff := time.Now().Add(time.Hour) // every line is old
	got := frameTexts(t, q.TakeRecent(nil, cutoff, 3, nil))
	sameTexts(t, got, "event:status", SkippedText(7), "notice", "7", "8", "9")

	// Lines newer than the cutoff stay, however many.
	b.PublishAll(burst)
	got = frameTexts(t, q.TakeRecent(nil, time.Now().Add(-time.Hour), 3, nil))
	if len(got) != 12 || got[0] != "0" {
		t.Fatalf("recent lines skipped: %q", got)
	}
	// The owner's marker text; the queue's drops and the skipped old lines
	// add up in one marker.
	q2 := NewQueue(func() int { return 5 }, nil, nil)
	b.Attach(q2)
	b.PublishAll(burst) // 12 frames into 5: 7 game lines dropped, the notice kept
	marker := func(n int) Frame { return Encode(New(ConsoleOutput, "skipped "+strconv.Itoa(n))) }
	got = frameTexts(t, q2.TakeRecent(nil, cutoff, 1, marker))
	sameTexts(t, got, "event:status", "skipped 9", "notice", "9")
}

// SkipOld skips again in frames already taken (a writer's rest of batch
// after a slow write): the first marker is kept and not counted as a line,
// and the second counts only the lines it skipped.
func TestSkipOldOnTakenFrames(t *testing.T) {
	b := NewBus()
	q := NewQueue(func() int { return 100 }, nil, nil)
	b.Attach(q)
	var burst []Event
	for i := range 10 {
		burst = append(burst, New(ConsoleOutput, strconv.Itoa(i)))
	}
	b.PublishAll(burst)
	batch := q.TakeRecent(nil, time.Now().Add(-time.Hour), 3, nil) // nothing old yet
	if len(batch) != 10 {
		t.Fatalf("%d frames", len(batch))
	}
	cutoff := time.Now().Add(time.Hour) // every line is old now
	rest := SkipOld(batch[2:], cutoff, 3, nil)
	sameTexts(t, frameTexts(t, rest), SkippedText(5), "7", "8", "9")
	// Once more on what is left: the marker is not skipped or counted.
	rest = SkipOld(rest, cutoff, 1, nil)
	sameTexts(t, frameTexts(t, rest), SkippedText(5), SkippedText(2), "9") // in order
	// Nothing old: unchanged.
	if got := SkipOld(rest, time.Now().Add(-time.Hour), 0, nil); len(got) != 3 {
		t.Fatalf("%d frames left, want 3", len(got))
	}
}
