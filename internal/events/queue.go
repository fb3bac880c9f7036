package events

import (
	"encoding/json"
	"sync"
	"time"
)

// Frame is an event encoded once in its wire form ({"event":…,"args":[…]}),
// shared read-only by every subscriber that receives it.
type Frame struct {
	Name string
	Data []byte
}

// Encode returns e's frame. args is always an array, empty when e has none.
func Encode(e Event) Frame {
	if e.Args == nil {
		e.Args = []string{}
	}
	b, err := json.Marshal(e)
	if err != nil { // strings always encode; keep the frame well-formed anyway
		b = []byte(`{"event":"","args":[]}`)
	}
	return Frame{Name: e.Name, Data: b}
}

// Queue is one subscriber's bounded FIFO of frames. It holds no memory while
// empty and grows on demand up to a limit read at every offer (so that a
// configuration change applies at once). A frame offered to a full queue
// is dropped for this subscriber only, and the queue remembers since when it
// has been full, so that its owner can drop a consumer that stopped reading.
//
// The owner drains it with Take; notify is called (outside the queue's
// lock) whenever a frame lands in an empty queue.
type Queue struct {
	limit  func() int
	accept func(name string) bool
	notify func()

	mu        sync.Mutex
	frames    []Frame
	fullSince time.Time
	dropped   uint64
	bus       *Bus
	gone      bool // the bus closed while attached
}

// NewQueue returns a queue that is attached to no bus yet. limit caps the
// frames offered by a bus (at least 1); accept, when not nil, filters them
// by event name; notify, when not nil, is called when the queue stops
// being empty.
func NewQueue(limit func() int, accept func(name string) bool, notify func()) *Queue {
	return &Queue{limit: limit, accept: accept, notify: notify}
}

// Put appends a frame whatever the limit: for the owner's own answers,
// which its caller bounds.
func (q *Queue) Put(f Frame) {
	q.mu.Lock()
	wasEmpty := len(q.frames) == 0
	q.frames = append(q.frames, f)
	q.mu.Unlock()
	if wasEmpty && q.notify != nil {
		q.notify()
	}
}

// offer appends a frame published on the bus, or drops it when the queue is
// full. It never blocks.
func (q *Queue) offer(f Frame) {
	if q.accept != nil && !q.accept(f.Name) {
		return
	}
	limit := max(1, q.limit())
	q.mu.Lock()
	if len(q.frames) >= limit {
		if q.fullSince.IsZero() {
			q.fullSince = time.Now()
		}
		q.dropped++
		q.mu.Unlock()
		return
	}
	q.fullSince = time.Time{}
	wasEmpty := len(q.frames) == 0
	q.frames = append(q.frames, f)
	q.mu.Unlock()
	if wasEmpty && q.notify != nil {
		q.notify()
	}
}

// Take removes and returns every queued frame, in order. spare (cleared)
// becomes the queue's storage, so that a draining loop swaps two slices
// instead of allocating; pass nil to let the queue start empty.
func (q *Queue) Take(spare []Frame) []Frame {
	clear(spare)
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.frames
	q.frames = spare[:0]
	return out
}

// Len reports how many frames are queued.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.frames)
}

// Trim releases the queue's storage when it is empty, so that an idle
// subscriber holds nothing.
func (q *Queue) Trim() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.frames) == 0 {
		q.frames = nil
	}
}

// FullFor reports how long the queue has been continuously full (0 when it
// has room).
func (q *Queue) FullFor() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.fullSince.IsZero() {
		return 0
	}
	if len(q.frames) < max(1, q.limit()) {
		q.fullSince = time.Time{} // the reader caught up since the last drop
		return 0
	}
	return time.Since(q.fullSince)
}

// Dropped reports how many frames did not fit.
func (q *Queue) Dropped() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}

// Gone reports whether the bus q was attached to has closed (the server
// is gone); notify is called when that happens.
func (q *Queue) Gone() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.gone
}

// Attach subscribes q to the bus and queues first before any event
// published from then on; it reports false when the bus is closed (the
// server is gone). A queue is attached to one bus at most.
func (b *Bus) Attach(q *Queue, first ...Frame) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.queues[q] = struct{}{}
	q.mu.Lock()
	q.bus = b
	q.mu.Unlock()
	for _, f := range first {
		q.Put(f)
	}
	return true
}

// Detach unsubscribes q from its bus, if any.
func (q *Queue) Detach() {
	q.mu.Lock()
	b := q.bus
	q.bus = nil
	q.mu.Unlock()
	if b != nil {
		b.mu.Lock()
		delete(b.queues, q)
		b.mu.Unlock()
	}
}
