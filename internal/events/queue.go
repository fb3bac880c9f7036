package events

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"
)

// Frame is an event encoded once in its wire form ({"event":…,"args":[…]}),
// shared read-only by every subscriber that receives it.
type Frame struct {
	Name string
	Data []byte
	// At is when the bus published the frame (zero for frames a queue's
	// owner Puts itself); TakeRecent skips console lines by it.
	At time.Time
	// Kept: never skipped by TakeRecent (Event.Kept).
	Kept bool
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
	return Frame{Name: e.Name, Data: b, Kept: e.Kept}
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
	frames    []Frame // oldest first
	fullSince time.Time
	dropped   uint64
	skipped   int // console lines dropped from the queue since the last take
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
	wasEmpty := q.lenLocked() == 0
	q.frames = append(q.frames, f)
	q.mu.Unlock()
	if wasEmpty && q.notify != nil {
		q.notify()
	}
}

func (q *Queue) lenLocked() int { return len(q.frames) }

// offer appends frames published on the bus (in order). When the queue is
// full, the oldest console line makes room (counted for the skipped-lines
// marker of the next take, so that the newest lines always get through);
// when no console line is queued, the offered frame is dropped. It never
// blocks.
func (q *Queue) offer(fs ...Frame) {
	limit := max(1, q.limit())
	added := false
	q.mu.Lock()
	wasEmpty := q.lenLocked() == 0
	for _, f := range fs {
		if q.accept != nil && !q.accept(f.Name) {
			continue
		}
		if q.lenLocked() >= limit {
			if q.fullSince.IsZero() {
				q.fullSince = time.Now()
			}
			if !q.dropOldestConsoleLocked(limit) {
				q.dropped++
				continue
			}
		} else {
			q.fullSince = time.Time{}
		}
		q.frames = append(q.frames, f)
		added = true
	}
	q.mu.Unlock()
	if added && wasEmpty && q.notify != nil {
		q.notify()
	}
}

// dropOldestConsoleLocked makes room in a full queue: it removes its
// oldest console lines (not kept ones), a quarter of the limit at once so
// that a queue that stays full costs one pass per quarter, not one per
// frame; false when there is none to remove.
func (q *Queue) dropOldestConsoleLocked(limit int) bool {
	want := max(1, limit/4)
	w, n := 0, 0
	for r := range q.frames {
		f := q.frames[r]
		if n < want && f.Name == ConsoleOutput && !f.Kept {
			n++
			continue
		}
		q.frames[w] = f
		w++
	}
	if n == 0 {
		return false
	}
	clear(q.frames[w:])
	q.frames = q.frames[:w]
	q.dropped += uint64(n)
	q.skipped += n
	return true
}

// Take removes and returns every queued frame, in order. spare (cleared)
// becomes the queue's storage, so that a draining loop swaps two slices
// instead of allocating; pass nil to let the queue start empty. Console
// lines the queue dropped when it was full are reported by a
// skipped-lines marker in front of the first console line.
func (q *Queue) Take(spare []Frame) []Frame {
	return q.TakeRecent(spare, time.Time{}, 0, nil)
}

// TakeRecent is Take for a consumer that may lag: console lines published
// before cutoff are skipped, except the newest keep console lines of the
// batch, and one marker (a console line, marker(n), SkippedMarker when nil)
// stands where they were, in front of the first console line kept. A zero
// cutoff skips nothing by age. Other events are never skipped.
func (q *Queue) TakeRecent(spare []Frame, cutoff time.Time, keep int, marker func(n int) Frame) []Frame {
	clear(spare)
	q.mu.Lock()
	out := q.frames
	skipped := q.skipped
	q.frames, q.skipped = spare[:0], 0
	q.mu.Unlock()
	if !cutoff.IsZero() {
		var n int
		out, n = skipOld(out, cutoff, keep)
		skipped += n
	}
	if skipped > 0 {
		if marker == nil {
			marker = SkippedMarker
		}
		out = insertMarker(out, marker(skipped))
	}
	return out
}

// skipOld removes, in place, the console lines of batch published before
// cutoff, except the newest keep console lines; it returns the batch and
// how many lines it removed.
func skipOld(batch []Frame, cutoff time.Time, keep int) ([]Frame, int) {
	out, n, _ := skipOldAt(batch, cutoff, keep)
	return out, n
}

// skipOldAt is skipOld that also returns where the first removed line was
// in the returned batch.
func skipOldAt(batch []Frame, cutoff time.Time, keep int) ([]Frame, int, int) {
	lines := 0
	for i := range batch {
		if batch[i].Name == ConsoleOutput {
			lines++
		}
	}
	skippable := lines - keep // the lines before the newest keep ones
	if skippable <= 0 {
		return batch, 0, 0
	}
	w, n, line, first := 0, 0, 0, 0
	for r := range batch {
		f := batch[r]
		if f.Name == ConsoleOutput {
			line++
			if line <= skippable && !f.Kept && f.At.Before(cutoff) {
				if n == 0 {
					first = w
				}
				n++
				continue
			}
		}
		batch[w] = f
		w++
	}
	clear(batch[w:])
	return batch[:w], n, first
}

// SkippedText is the text of the marker of n skipped console lines.
func SkippedText(n int) string {
	return strconv.Itoa(n) + " lines skipped: this console could not keep up with the server's output"
}

// SkippedMarker is the console line that stands for n skipped ones.
func SkippedMarker(n int) Frame { return Encode(New(ConsoleOutput, SkippedText(n))) }

// SkipOld is TakeRecent's skipping by age for frames already taken from
// the queue (issue 38: a writer that waited for a slow socket checks the
// rest of its batch again before each write): the console lines published
// before cutoff, except the newest keep, are removed in place, and one
// marker (marker(n), SkippedMarker when nil) stands in front of the first
// console line kept after them (behind a marker of an earlier skip). A
// marker is never skipped itself.
func SkipOld(batch []Frame, cutoff time.Time, keep int, marker func(n int) Frame) []Frame {
	out, n, at := skipOldAt(batch, cutoff, keep)
	if n == 0 {
		return out
	}
	if marker == nil {
		marker = SkippedMarker
	}
	m := marker(n)
	m.Kept = true
	out = append(out, Frame{})
	copy(out[at+1:], out[at:])
	out[at] = m
	return out
}

// insertMarker puts marker in front of the first console line of batch (at
// its end when it has none). The marker is Kept: a later skip of the same
// frames leaves it (its count stays exact).
func insertMarker(batch []Frame, marker Frame) []Frame {
	marker.Kept = true
	at := len(batch)
	for i := range batch {
		if batch[i].Name == ConsoleOutput {
			at = i
			break
		}
	}
	batch = append(batch, Frame{})
	copy(batch[at+1:], batch[at:])
	batch[at] = marker
	return batch
}

// Len reports how many frames are queued.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lenLocked()
}

// Trim releases the queue's storage when it is empty, so that an idle
// subscriber holds nothing.
func (q *Queue) Trim() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lenLocked() == 0 {
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
	if q.lenLocked() < max(1, q.limit()) {
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
