// Package statepush tells the panel when a server changes state (Pelican's
// POST /api/remote/servers/{uuid}/container/status). The Pelican panel
// caches the pushed state for an hour and shows it instead of polling the
// node, so a push that is lost leaves the panel showing a stale state for up
// to an hour: the pusher keeps the latest state of each server and retries
// until the panel has it. A panel without the route (Pterodactyl answers
// 404) is asked again only every RouteRecheck, so it sees one request in
// that time, not one per state change.
package statepush

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/wharf/wharf/internal/panel"
)

// RouteRecheck is how long pushes pause after the panel answered that it has
// no such route; MaxRetryWait bounds the wait between retries of a failed
// push.
const (
	RouteRecheck = 10 * time.Minute
	MaxRetryWait = time.Minute
)

// Sender delivers one push (panel.Client.PushContainerStatus).
type Sender func(ctx context.Context, uuid string, st panel.ContainerStatus) error

// Pusher delivers state changes in the background, one at a time, the
// latest state of each server only.
type Pusher struct {
	send Sender
	log  *slog.Logger
	now  func() time.Time

	mu      sync.Mutex
	pending map[string]panel.ContainerStatus // uuid → what the panel lacks
	paused  time.Time                        // no pushes before this (route missing)
	wake    chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// New starts a pusher; Close stops it. now is the clock (time.Now when nil).
func New(send Sender, log *slog.Logger, now func() time.Time) *Pusher {
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pusher{send: send, log: log, now: now, pending: map[string]panel.ContainerStatus{},
		wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go p.run(ctx)
	return p
}

// Changed records that server uuid went from one state to another. It never
// blocks: a change not yet delivered is replaced by the newer one (keeping
// the state the panel last saw as the previous one).
func (p *Pusher) Changed(uuid, from, to string) {
	p.mu.Lock()
	if old, ok := p.pending[uuid]; ok {
		from = old.PreviousState
	}
	p.pending[uuid] = panel.ContainerStatus{PreviousState: from, NewState: to}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Forget drops what is pending for a server that is gone.
func (p *Pusher) Forget(uuid string) {
	p.mu.Lock()
	delete(p.pending, uuid)
	p.mu.Unlock()
}

// Close stops delivering and waits for the pusher's goroutine.
func (p *Pusher) Close() {
	p.cancel()
	<-p.done
}

func (p *Pusher) run(ctx context.Context) {
	defer close(p.done)
	retry := time.Second
	for {
		wait := p.deliver(ctx)
		switch {
		case wait < 0: // nothing pending
			retry = time.Second
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			}
			continue
		case wait == 0: // a push failed: back off
			wait = retry
			retry = min(2*retry, MaxRetryWait)
		default:
			retry = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// deliver sends what is pending. It returns -1 when all was delivered, 0
// when a push failed (retry later), or how long to wait while the panel's
// route is missing.
func (p *Pusher) deliver(ctx context.Context) time.Duration {
	for {
		p.mu.Lock()
		if wait := p.paused.Sub(p.now()); wait > 0 {
			p.mu.Unlock()
			return wait
		}
		uuid, st, ok := p.next()
		p.mu.Unlock()
		if !ok {
			return -1
		}
		err := p.send(ctx, uuid, st)
		p.mu.Lock()
		switch {
		case err == nil:
			// Delivered, unless a newer change came in meanwhile.
			if cur, ok := p.pending[uuid]; ok && cur.NewState == st.NewState {
				delete(p.pending, uuid)
			}
		case panel.IsRouteMissing(err):
			p.paused = p.now().Add(RouteRecheck)
			p.log.Info("the panel has no container status route (Pterodactyl): state pushes pause", "for", RouteRecheck)
		default:
			p.mu.Unlock()
			if ctx.Err() == nil {
				p.log.Warn("could not push a server's state to the panel; retrying", "server", uuid, "state", st.NewState, "error", err)
			}
			return 0
		}
		p.mu.Unlock()
	}
}

// next picks one pending change; callers hold mu.
func (p *Pusher) next() (string, panel.ContainerStatus, bool) {
	for uuid, st := range p.pending {
		return uuid, st, true
	}
	return "", panel.ContainerStatus{}, false
}
