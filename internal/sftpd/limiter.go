package sftpd

import (
	"sync"
	"time"
)

// Failed logins are limited per source address with a token bucket: a
// burst of loginBurst attempts, then one more every loginRefill. An attempt
// takes a token before the panel is asked and gives it back when the login
// succeeds (or the panel could not answer), so only failures count and the
// panel is never asked more often than this, even by parallel connections.
const (
	loginBurst  = 10
	loginRefill = 6 * time.Second
	// limiterMaxAddrs bounds the table; full buckets are forgotten first.
	limiterMaxAddrs = 65536
)

type bucket struct {
	tokens float64
	last   time.Time
}

type loginLimiter struct {
	mu    sync.Mutex
	now   func() time.Time
	addrs map[string]*bucket
}

func newLoginLimiter(now func() time.Time) *loginLimiter {
	if now == nil {
		now = time.Now
	}
	return &loginLimiter{now: now, addrs: map[string]*bucket{}}
}

func (l *loginLimiter) refill(b *bucket, now time.Time) {
	b.tokens = min(loginBurst, b.tokens+now.Sub(b.last).Seconds()/loginRefill.Seconds())
	b.last = now
}

// take reserves one attempt for addr; false when none is left.
func (l *loginLimiter) take(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.addrs[addr]
	if !ok {
		if len(l.addrs) >= limiterMaxAddrs {
			l.prune(now)
		}
		b = &bucket{tokens: loginBurst, last: now}
		l.addrs[addr] = b
	}
	l.refill(b, now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// refund gives back an attempt that did not fail.
func (l *loginLimiter) refund(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.addrs[addr]; ok {
		b.tokens = min(loginBurst, b.tokens+1)
	}
}

// prune forgets addresses whose bucket has refilled (they would start full
// anyway); when none has, it forgets everything rather than grow.
func (l *loginLimiter) prune(now time.Time) {
	for a, b := range l.addrs {
		l.refill(b, now)
		if b.tokens >= loginBurst {
			delete(l.addrs, a)
		}
	}
	if len(l.addrs) >= limiterMaxAddrs {
		clear(l.addrs)
	}
}
