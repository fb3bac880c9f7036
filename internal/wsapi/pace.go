package wsapi

import (
	"encoding/binary"
	"sync"
	"time"
)

// The console's pacing (issue 38 §1): the kernel's buffers between the
// daemon and a client (the daemon's send buffer, and above all the
// client's receive buffer, which Linux grows to megabytes) hold lines that
// the daemon counts as written but the client has not read; a client that
// reads slower than the console prints would find seconds of old lines
// there, out of reach of the queue's skipping of old lines. So the writer
// asks the client how far it has read: every quarter of the window (4-64
// KiB; the first after 16 KiB) it puts a
// websocket ping behind the frames it writes, and a client answers a ping
// when it reads it (RFC 6455; browsers do it on their own, and frames are
// read in order), so a pong says that everything written before its ping
// was read. The bytes written and not yet acknowledged are kept within a
// window; the window shrinks when a ping takes longer than the budget (the
// client's queueing delay beyond the smallest round trip seen) and grows
// while pings come back within half of it and the window is in use. While
// the window is full the writer writes nothing: the queue ages, and its old
// lines are skipped behind the exact "N lines skipped" marker.
//
// A socket is paced from its first ping, so that a flood's first burst does
// not fill the client's buffer before the first pong; when a pong does not
// come within WriteTimeout (or, before the socket answered any ping,
// within four budgets), the pacing gives up on the socket until its next
// pong, and the write deadline rules it as before: a client that does not
// answer pings is served as before after one such wait. The pacer of a socket is made at its first ping: a
// socket that never wrote 16 KiB holds none.

const (
	// DefaultPaceBudget: the queueing delay of a ping beyond the smallest
	// round trip seen, over which the window shrinks.
	DefaultPaceBudget = 250 * time.Millisecond
	paceWindowStart   = 256 << 10
	paceWindowMin     = 16 << 10
	paceWindowMax     = 4 << 20
	pingFirst         = 16 << 10 // bytes written before a socket's first ping
	// Bytes written between two pings: a quarter of the window, within these.
	pingEveryMin     = 4 << 10
	pingEveryMax     = 64 << 10
	pingsOutstanding = 8 // pings awaiting their pong, at most
	firstPongWait    = 4 // budgets: the longest wait for a socket's first pong
)

type sentPing struct {
	id       uint64
	at       time.Time
	offset   uint64 // bytes written before the ping
	inflight uint64 // bytes unacknowledged when it was sent
}

// pacer is the pacing state of one socket.
type pacer struct {
	budget time.Duration
	wake   chan struct{} // a pong (or the session's end) for a waiting writer
	fixed  bool          // the window does not adapt (tests)

	mu       sync.Mutex
	nextID   uint64
	pings    []sentPing // awaiting their pong, oldest first
	lastPing uint64     // offset of the last ping sent
	acked    uint64     // offset of the last ping answered
	answered bool       // the socket answered a ping since the pacing last gave up
	gaveUp   bool       // a pong did not come in time: no pacing until one comes
	window   uint64
	minDelay time.Duration
	changed  time.Time // when the window last changed: one change per round trip
}

// newPacer returns a pacer; a window other than zero is fixed (tests).
func newPacer(budget time.Duration, window uint64) *pacer {
	if window > 0 {
		return &pacer{budget: budget, wake: make(chan struct{}, 1), window: window, fixed: true}
	}
	return &pacer{budget: budget, wake: make(chan struct{}, 1), window: paceWindowStart}
}

// due returns the ping frame to write behind the frames written so far
// (written bytes), if one is due, and records it as sent now.
func (p *pacer) due(written uint64, now time.Time) ([2 + pingIDLen]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	every := min(uint64(pingEveryMax), max(p.window/4, pingEveryMin))
	if written-p.lastPing < every || len(p.pings) >= pingsOutstanding {
		return [2 + pingIDLen]byte{}, false
	}
	p.nextID++
	p.pings = append(p.pings, sentPing{id: p.nextID, at: now, offset: written, inflight: written - p.acked})
	p.lastPing = written
	return pingFrame(p.nextID), true
}

// pong takes the client's answer to the ping whose payload it carries.
func (p *pacer) pong(payload []byte, now time.Time) {
	if len(payload) != pingIDLen {
		return
	}
	id := binary.BigEndian.Uint64(payload)
	p.mu.Lock()
	i := 0
	for i < len(p.pings) && p.pings[i].id != id {
		i++
	}
	if i == len(p.pings) { // not ours, or answered already
		p.mu.Unlock()
		return
	}
	sp := p.pings[i]
	p.pings = p.pings[:copy(p.pings, p.pings[i+1:])]
	if len(p.pings) == 0 {
		p.pings = nil
	}
	p.acked = sp.offset
	p.answered, p.gaveUp = true, false
	p.adapt(sp, now)
	p.mu.Unlock()
	p.signal()
}

// adapt changes the window after the round trip of sp.
func (p *pacer) adapt(sp sentPing, now time.Time) {
	d := now.Sub(sp.at)
	if p.minDelay == 0 || d < p.minDelay {
		p.minDelay = max(d, 1)
	}
	if p.fixed || sp.at.Before(p.changed) { // sent before the last change: its round is judged
		return
	}
	q := d - p.minDelay
	switch {
	case q > p.budget:
		p.window = max(paceWindowMin, uint64(float64(p.window)*float64(p.budget)/float64(q)))
		p.changed = now
	case q <= p.budget/2 && sp.inflight >= p.window/2:
		p.window = min(paceWindowMax, p.window*2)
		p.changed = now
	}
}

// blocked reports whether the writer must wait for a pong before it writes
// more (written bytes so far): a ping is out, the window is full, and the
// pacing did not give up on the socket; and whether the socket has
// answered a ping yet.
func (p *pacer) blocked(written uint64) (blocked, answered bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.gaveUp && len(p.pings) > 0 && written-p.acked >= p.window, p.answered
}

// giveUp: the socket's pong did not come in time; it is not paced until it
// answers a ping.
func (p *pacer) giveUp() {
	p.mu.Lock()
	p.answered, p.gaveUp = false, true
	p.mu.Unlock()
}

// signal wakes a waiting writer (or the next one to wait).
func (p *pacer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// pong is the socket's pong callback (on the reader's goroutine, or the
// library's close handshake).
func (s *session) pong(payload []byte) {
	if p := s.pace.Load(); p != nil {
		p.pong(payload, time.Now())
	}
}

// pingDue returns the ping to write behind what the writer wrote, when
// pacing is on and one is due; the pacer is made at the first.
func (s *session) pingDue() ([2 + pingIDLen]byte, bool) {
	budget := s.hub.opts.PaceBudget
	if budget < 0 {
		return [2 + pingIDLen]byte{}, false
	}
	written, pending := s.out.written()
	if pending { // the last ping still waits for the end of another's frame
		return [2 + pingIDLen]byte{}, false
	}
	p := s.pace.Load()
	if p == nil {
		if written < pingFirst {
			return [2 + pingIDLen]byte{}, false
		}
		p = newPacer(budget, s.hub.opts.paceWindow)
		s.pace.Store(p)
	}
	return p.due(written, time.Now())
}

// awaitWindow waits while the socket's window is full; ok is false when the
// session ends meanwhile, waited true when it waited. The pacing gives up on a socket (until its next
// pong) whose pong does not come within WriteTimeout, or within
// firstPongWait while it never answered one: a client that does not answer
// pings is served as before, after one such wait.
func (s *session) awaitWindow() (ok, waited bool) {
	p := s.pace.Load()
	if p == nil {
		return true, false
	}
	var timer *time.Timer
	for {
		written, _ := s.out.written()
		blocked, answered := p.blocked(written)
		if !blocked {
			break
		}
		waited = true
		if s.ended.Load() {
			return false, true
		}
		if timer == nil {
			d := s.hub.opts.WriteTimeout
			if !answered {
				d = min(d, firstPongWait*p.budget)
			}
			timer = time.NewTimer(d)
			defer timer.Stop()
		}
		select {
		case <-p.wake:
		case <-timer.C:
			p.giveUp()
			return !s.ended.Load(), true
		}
	}
	// A writer that did not wait writes on as before, closing or not (the
	// batch being written finishes before the close frame).
	return !waited || !s.ended.Load(), waited
}
