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
	// buckets: global, auth, send logs, send command, other.
	buckets [5]*rate.Limiter
	// noticed remembers which buckets already answered `throttled` since
	// they last let a message through: one notice per throttled burst.
	noticed [5]bool
}

const (
	bucketGlobal = iota
	bucketAuth
	bucketLogs
	bucketCommands
	bucketOther
)

// bucketRates are the refill rate and burst of each bucket.
var bucketRates = [5]struct {
	every rate.Limit
	burst int
}{
	bucketGlobal:   {rate.Every(200 * time.Millisecond), 10},
	bucketAuth:     {rate.Every(2500 * time.Millisecond), 2},
	bucketLogs:     {rate.Every(2500 * time.Millisecond), 2},
	bucketCommands: {10, 10},
	bucketOther:    {4, 4},
}

func newLimiter() *limiter { return &limiter{} }

// bucket returns bucket i, made on first use: most sockets only ever
// authenticate, and an idle socket should hold no more than it needs.
func (l *limiter) bucket(i int) *rate.Limiter {
	if l.buckets[i] == nil {
		l.buckets[i] = rate.NewLimiter(bucketRates[i].every, bucketRates[i].burst)
	}
	return l.buckets[i]
}

// allow reports whether an inbound event may be handled now. When it may
// not, notice is the argument of the `throttled` answer ("global" or the
// event name), or "" when this burst was already answered.
func (l *limiter) allow(event string, now time.Time) (ok bool, notice string) {
	bucket := bucketOther
	switch event {
	case eventAuth:
		bucket = bucketAuth
	case eventSendLogs:
		bucket = bucketLogs
	case eventSendCommand:
		bucket = bucketCommands
	}
	if !l.bucket(bucketGlobal).AllowN(now, 1) {
		return false, l.notice(bucketGlobal, "global")
	}
	l.noticed[bucketGlobal] = false
	if !l.bucket(bucket).AllowN(now, 1) {
		return false, l.notice(bucket, event)
	}
	l.noticed[bucket] = false
	return true, ""
}

func (l *limiter) notice(bucket int, name string) string {
	if l.noticed[bucket] {
		return ""
	}
	l.noticed[bucket] = true
	return name
}
