package server

import (
	"sync"
	"time"

	"github.com/wharf/wharf/internal/config"
)

// MaxLineBytes bounds one console line; the rest of a longer line is dropped
// (one 10 MB line without a newline must not grow memory or stop the console).
const MaxLineBytes = 16 << 10

// throttle lets at most `lines` lines through per window; the first line
// dropped in a window is reported so that one notice can be sent.
type throttle struct {
	mu       sync.Mutex
	lines    func() (int, time.Duration)
	now      func() time.Time
	start    time.Time
	count    int
	notified bool
}

// allow reports whether the line may pass, and whether this is the first
// drop of the window (time to tell the user).
func (t *throttle) allow() (ok, firstDrop bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	limit, window := t.lines()
	if limit <= 0 || window <= 0 {
		return true, false // throttling disabled
	}
	now := t.now()
	if now.Sub(t.start) >= window {
		t.start, t.count, t.notified = now, 0, false
	}
	if t.count < limit {
		t.count++
		return true, false
	}
	if !t.notified {
		t.notified = true
		return false, true
	}
	return false, false
}

func (t *throttle) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.start, t.count, t.notified = time.Time{}, 0, false
}

// consoleLines is how many console lines a server keeps: the configured
// system.websocket_log_count, and never fewer than 100.
func consoleLines(cfg *config.Config) int { return max(100, cfg.System.WebsocketLogCount) }

// ring keeps the last lines of console output. Its size is read live from
// size (system.websocket_log_count may change through /api/update): a
// change resizes the ring at the next add or read, keeping the newest lines.
type ring struct {
	size  func() int
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

func newRing(size func() int) *ring {
	r := &ring{size: size}
	r.lines = make([]string, max(1, size()))
	return r
}

// fit resizes the ring to the current size, keeping the newest lines. The
// caller holds mu.
func (r *ring) fit() {
	want := max(1, r.size())
	if want == len(r.lines) {
		return
	}
	keep := r.lastLocked(want)
	r.lines = make([]string, want)
	copy(r.lines, keep)
	r.next = len(keep) % want
	r.full = len(keep) == want
}

func (r *ring) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fit()
	r.lines[r.next] = line
	r.next = (r.next + 1) % len(r.lines)
	if r.next == 0 {
		r.full = true
	}
}

// last returns up to n of the newest lines, oldest first.
func (r *ring) last(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fit()
	return r.lastLocked(n)
}

func (r *ring) lastLocked(n int) []string {
	count := r.next
	if r.full {
		count = len(r.lines)
	}
	n = min(n, count)
	out := make([]string, 0, n)
	for i := count - n; i < count; i++ {
		idx := i
		if r.full {
			idx = (r.next + i) % len(r.lines)
		}
		out = append(out, r.lines[idx])
	}
	return out
}
