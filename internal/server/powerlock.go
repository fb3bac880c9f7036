package server

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errKilled is the cause given to the context of a power action that a kill
// cancelled.
var errKilled = errors.New("cancelled by a kill")

// powerLock lets one power action (or a job's stop) change a server's
// process at a time. The others wait for it, for a bounded time, in no
// particular order.
//
// A kill never waits: it cancels the holder's context and, until it is done
// (the process is gone), holds every other action back, also the ones that
// were already waiting. So an action queued behind a stop that a kill ends
// runs on the offline server the kill leaves, never on the half-stopped one
// in between.
//
// The zero value is an unlocked lock.
type powerLock struct {
	mu      sync.Mutex
	held    bool
	cancel  context.CancelCauseFunc // the holder's, while held
	kills   int                     // kills in progress
	changed chan struct{}           // closed and replaced when held or kills drop
}

// free reports whether an action may take the lock now. l.mu is held.
func (l *powerLock) free() bool { return !l.held && l.kills == 0 }

// changedLocked returns the channel closed at the next release. l.mu is held.
func (l *powerLock) changedLocked() chan struct{} {
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

// broadcastLocked wakes every waiter. l.mu is held.
func (l *powerLock) broadcastLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// take marks the lock held by a new holder whose context derives from ctx.
// l.mu is held.
func (l *powerLock) takeLocked(ctx context.Context) (context.Context, func()) {
	hctx, cancel := context.WithCancelCause(ctx)
	l.held, l.cancel = true, cancel
	var once sync.Once
	return hctx, func() {
		once.Do(func() {
			l.mu.Lock()
			l.held, l.cancel = false, nil
			l.broadcastLocked()
			l.mu.Unlock()
			cancel(context.Canceled)
		})
	}
}

// tryAcquire takes the lock if no action holds it and no kill is in
// progress. The holder works under the returned context, which a kill
// cancels, and calls release (once is enough, more is harmless) when done.
func (l *powerLock) tryAcquire(ctx context.Context) (hctx context.Context, release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.free() {
		return nil, nil, false
	}
	hctx, release = l.takeLocked(ctx)
	return hctx, release, true
}

// acquire takes the lock, waiting up to wait for it. With wait <= 0 a busy
// lock is ErrLocked at once; a wait that runs out is ErrLockTimeout; a ctx
// that ends, its error.
func (l *powerLock) acquire(ctx context.Context, wait time.Duration) (hctx context.Context, release func(), err error) {
	if hctx, release, ok := l.tryAcquire(ctx); ok {
		return hctx, release, nil
	}
	if wait <= 0 {
		return nil, nil, ErrLocked
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		l.mu.Lock()
		if l.free() {
			hctx, release = l.takeLocked(ctx)
			l.mu.Unlock()
			return hctx, release, nil
		}
		changed := l.changedLocked()
		l.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			return nil, nil, ErrLockTimeout
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// beginKill starts a kill: it cancels the holder and waits up to bound for
// it to release the lock (unwound reports whether it did). From the call on,
// no other action takes the lock until end is called; the caller kills the
// process in between. When ctx ends first, the kill is over (end was called)
// and the error is ctx's.
func (l *powerLock) beginKill(ctx context.Context, bound time.Duration) (end func(), unwound bool, err error) {
	l.mu.Lock()
	l.kills++
	if l.cancel != nil {
		l.cancel(errKilled)
	}
	l.mu.Unlock()
	var once sync.Once
	end = func() {
		once.Do(func() {
			l.mu.Lock()
			l.kills--
			l.broadcastLocked()
			l.mu.Unlock()
		})
	}
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for {
		l.mu.Lock()
		if !l.held {
			l.mu.Unlock()
			return end, true, nil
		}
		changed := l.changedLocked()
		l.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			return end, false, nil
		case <-ctx.Done():
			end()
			return nil, false, ctx.Err()
		}
	}
}

// killed reports whether ctx, a holder's context, was cancelled by a kill.
func killed(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errKilled) }
