package tokens

import (
	"sync"
	"time"
)

// Denylist refuses websocket tokens issued before the daemon's boot or
// before a user's deauthorization (POST /api/deauthorize-user).
//
// JWT iat has whole seconds, so times are compared at second granularity:
// a token is refused when its iat (in seconds) is at or before the boot
// time or the denial time truncated to seconds. A token minted in the same
// second as a deauthorization is therefore refused even if it was minted
// just after it; one minted a second later or more is accepted. Refusing
// in doubt is the safe side: the panel mints a new token on the next
// refresh.
type Denylist struct {
	boot int64

	mu    sync.RWMutex
	pairs map[string]int64 // server + ":" + user
	users map[string]int64 // user on every server

	// Websocket token ids denied by ws/deny (jtideny.go).
	jtis      map[string]jtiDenial
	forgotten int64 // latest denial time among the forgotten jti denials
	all       int64 // every token issued at or before it (a full jti list)
	nextSweep int64
}

// NewDenylist returns a denylist for a daemon that booted at boot.
func NewDenylist(boot time.Time) *Denylist {
	return &Denylist{boot: boot.Unix(), pairs: map[string]int64{}, users: map[string]int64{}, jtis: map[string]jtiDenial{}}
}

// Deny records that user's tokens issued at or before at are refused on
// servers; nil or empty servers means every server, including servers
// created later.
func (d *Denylist) Deny(user string, servers []string, at time.Time) {
	sec := at.Unix()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(servers) == 0 {
		if sec > d.users[user] {
			d.users[user] = sec
		}
		return
	}
	for _, s := range servers {
		k := s + ":" + user
		if sec > d.pairs[k] {
			d.pairs[k] = sec
		}
	}
}

// Check returns ErrDenied when a token of userUUID for serverUUID issued at
// iat must be refused: no iat (zero), issued at or before boot, or at or
// before a recorded denial for the pair or for the user everywhere.
func (d *Denylist) Check(serverUUID, userUUID string, iat time.Time) error {
	if iat.IsZero() {
		return claimErr(ErrDenied, "iat missing")
	}
	sec := iat.Unix()
	if sec <= d.boot {
		return claimErr(ErrDenied, "issued before the daemon started")
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if t, ok := d.users[userUUID]; ok && sec <= t {
		return claimErr(ErrDenied, "user deauthorized")
	}
	if t, ok := d.pairs[serverUUID+":"+userUUID]; ok && sec <= t {
		return claimErr(ErrDenied, "user deauthorized on this server")
	}
	return nil
}
