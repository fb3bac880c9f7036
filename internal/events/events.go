// Package events is the per-server publish/subscribe bus. Servers, backups and
// transfers publish; websocket sessions (and tests) subscribe.
//
// Publishing never blocks: every subscriber owns a bounded queue, and an event
// that does not fit is dropped for that subscriber only (a full Queue makes
// room by dropping its oldest console lines, reported to its owner by a
// skipped-lines marker, so that the newest lines get through). The subscriber can ask
// how long its queue has been full, so a consumer that stopped reading can be
// disconnected without slowing the publisher or other subscribers.
//
// Two kinds of subscribers: a Subscription receives Events on a channel of
// fixed size (tests, in-process consumers); a Queue receives Frames, each
// event encoded once for all queues, and holds memory only while it has
// frames (websocket sessions, which are many and mostly idle).
package events

import (
	"sync"
	"time"
)

// Well-known event names, as the panel's browser console expects them.
const (
	Status                 = "status"
	Stats                  = "stats"
	ConsoleOutput          = "console output"
	InstallOutput          = "install output"
	InstallStarted         = "install started"
	InstallCompleted       = "install completed"
	DaemonMessage          = "daemon message"
	BackupCompleted        = "backup completed"
	BackupRestoreCompleted = "backup restore completed"
	TransferStatus         = "transfer status"
	TransferLogs           = "transfer logs"
	Deleted                = "deleted"
	// FeatureMatch: a console line matched an egg feature (Pelican); the
	// argument is a JSON object {key, line, pattern}.
	FeatureMatch = "feature match"
)

// Event is one message, already in its wire shape: a name and string args.
type Event struct {
	Name string   `json:"event"`
	Args []string `json:"args"`
	// Kept: a console line never skipped for a consumer that lags (the
	// daemon's own notices); see Queue.TakeRecent.
	Kept bool `json:"-"`
}

// New builds an event.
func New(name string, args ...string) Event {
	if args == nil {
		args = []string{}
	}
	return Event{Name: name, Args: args}
}

// Bus fans events out to subscribers. The zero value is not usable; call NewBus.
type Bus struct {
	mu     sync.RWMutex
	subs   map[*Subscription]struct{}
	queues map[*Queue]struct{}
	closed bool
}

// NewBus returns an empty bus.
func NewBus() *Bus {
	return &Bus{subs: make(map[*Subscription]struct{}), queues: make(map[*Queue]struct{})}
}

// Subscription receives events from a Bus through C.
type Subscription struct {
	C <-chan Event

	bus       *Bus
	ch        chan Event
	mu        sync.Mutex
	fullSince time.Time // zero while the queue has room
	dropped   uint64
	once      sync.Once
}

// Subscribe registers a subscriber with a queue of size buf (at least 1).
// The subscriber must call Close when done.
func (b *Bus) Subscribe(buf int) *Subscription {
	if buf < 1 {
		buf = 1
	}
	ch := make(chan Event, buf)
	s := &Subscription{C: ch, ch: ch, bus: b}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		close(ch)
		s.once.Do(func() {})
		return s
	}
	b.subs[s] = struct{}{}
	return s
}

// Publish delivers e to every subscriber whose queue has room. It never blocks.
func (b *Bus) Publish(e Event) {
	if e.Args == nil {
		e.Args = []string{}
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	for s := range b.subs {
		s.offer(e)
	}
	if len(b.queues) == 0 {
		return
	}
	f := Encode(e)
	f.At = time.Now()
	for q := range b.queues {
		q.offer(f)
	}
}

// PublishAll publishes es in order, as Publish does one by one, but each
// queue takes them at once (one lock, one wake-up of its owner): a burst of
// console lines read together reaches a socket's writer as one batch.
func (b *Bus) PublishAll(es []Event) {
	if len(es) == 0 {
		return
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	for s := range b.subs {
		for _, e := range es {
			if e.Args == nil {
				e.Args = []string{}
			}
			s.offer(e)
		}
	}
	if len(b.queues) == 0 {
		return
	}
	now := time.Now()
	fs := make([]Frame, len(es))
	for i, e := range es {
		fs[i] = Encode(e)
		fs[i].At = now
	}
	for q := range b.queues {
		q.offer(fs...)
	}
}

// Close closes every subscription's channel; later subscriptions are born closed.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for s := range b.subs {
		s.once.Do(func() { close(s.ch) })
	}
	b.subs = map[*Subscription]struct{}{}
	for q := range b.queues {
		q.mu.Lock()
		q.bus, q.gone = nil, true
		q.mu.Unlock()
		if q.notify != nil {
			q.notify()
		}
	}
	b.queues = map[*Queue]struct{}{}
}

// Subscribers reports how many subscriptions and queues are attached.
func (b *Bus) Subscribers() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.subs) + len(b.queues)
}

func (s *Subscription) offer(e Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.ch <- e:
		s.fullSince = time.Time{}
	default:
		if s.fullSince.IsZero() {
			s.fullSince = time.Now()
		}
		s.dropped++
	}
}

// FullFor reports how long the queue has been continuously full (0 if it has room).
// A publish that finds room resets it.
func (s *Subscription) FullFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fullSince.IsZero() {
		return 0
	}
	if len(s.ch) < cap(s.ch) {
		// The reader caught up since the last drop.
		s.fullSince = time.Time{}
		return 0
	}
	return time.Since(s.fullSince)
}

// Dropped reports how many events did not fit in the queue.
func (s *Subscription) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Close unregisters the subscription and closes its channel.
func (s *Subscription) Close() {
	s.bus.mu.Lock()
	delete(s.bus.subs, s)
	s.bus.mu.Unlock()
	s.once.Do(func() { close(s.ch) })
}
