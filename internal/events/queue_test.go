package events

import (
	"encoding/json"
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
