package wsapi

import (
	"time"

	"golang.org/x/time/rate"
)

// limiter holds the per-connection inbound rate limits (attacks.md D3): a
// global bucket (one message per 200 ms, burst 10) in front of per-event
// buckets: auth and send logs 2 per 5 s each, send command 10/s, every other
// event 4/s together. The socket is owned by one reader goroutine, so the
// limiter needs no lock.
type limiter struct {
	global   *rate.Limiter
	auth     *rate.Limiter
	logs     *rate.Limiter
	commands *rate.Limiter
	other    *rate.Limiter
	// noticed remembers which buckets already answered `throttled` since
	// they last let a message through: one notice per throttled burst.
	noticed map[*rate.Limiter]bool
}

func newLimiter() *limiter {
	return &limiter{
		global:   rate.NewLimiter(rate.Every(200*time.Millisecond), 10),
		auth:     rate.NewLimiter(rate.Every(2500*time.Millisecond), 2),
		logs:     rate.NewLimiter(rate.Every(2500*time.Millisecond), 2),
		commands: rate.NewLimiter(10, 10),
		other:    rate.NewLimiter(4, 4),
		noticed:  map[*rate.Limiter]bool{},
	}
}

// allow reports whether an inbound event may be handled now. When it may
// not, notice is the argument of the `throttled` answer ("global" or the
// event name), or "" when this burst was already answered.
func (l *limiter) allow(event string, now time.Time) (ok bool, notice string) {
	bucket := l.other
	switch event {
	case eventAuth:
		bucket = l.auth
	case eventSendLogs:
		bucket = l.logs
	case eventSendCommand:
		bucket = l.commands
	}
	if !l.global.AllowN(now, 1) {
		return false, l.notice(l.global, "global")
	}
	l.noticed[l.global] = false
	if !bucket.AllowN(now, 1) {
		return false, l.notice(bucket, event)
	}
	l.noticed[bucket] = false
	return true, ""
}

func (l *limiter) notice(bucket *rate.Limiter, name string) string {
	if l.noticed[bucket] {
		return ""
	}
	l.noticed[bucket] = true
	return name
}
