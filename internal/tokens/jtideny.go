package tokens

import (
	"time"
)

// JTIRetention is how long a jti denial (POST /api/servers/{s}/ws/deny) is
// kept. The panels mint websocket tokens for 10 minutes (Pterodactyl's and
// Pelican's GenerateWebsocketToken: expiresAt now + 10 min); 15 minutes
// leaves room for clock skew. A token living longer than this that may have
// been covered by a forgotten denial is refused (see CheckWebsocket), so
// forgetting never lets a denied token back in.
const JTIRetention = 15 * time.Minute

// MaxJTIDenials bounds the jti denials kept at once. Past it, every
// websocket token issued until then is refused, as after a restart: the
// panel mints fresh ones, and memory stays bounded.
const MaxJTIDenials = 1 << 16

// MaxJTILength is the longest jti a denial accepts; the panels send an md5
// in hex (32 characters).
const MaxJTILength = 256

type jtiDenial struct {
	at     int64 // seconds: tokens with this jti issued at or before it are refused
	expiry int64 // seconds: the denial is forgotten after it
}

// DenyJTIs refuses the websocket tokens carrying one of jtis that were
// issued at or before at, as Wings' ws/deny does (router/tokens/websocket.go
// in pterodactyl/wings: a token with the same jti issued later is accepted).
// The panels' jti is md5(user id + server uuid), so a denial is one user on
// one server.
func (d *Denylist) DenyJTIs(jtis []string, at time.Time) {
	sec := at.Unix()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.forgetJTIs(sec)
	for _, j := range jtis {
		if len(d.jtis) >= MaxJTIDenials {
			if _, ok := d.jtis[j]; !ok {
				// Full of live denials: refuse every token issued until now.
				d.all = max(d.all, sec)
				clear(d.jtis)
				return
			}
		}
		if prev, ok := d.jtis[j]; !ok || sec > prev.at {
			d.jtis[j] = jtiDenial{at: sec, expiry: sec + int64(JTIRetention/time.Second)}
		}
	}
}

// forgetJTIs drops the denials older than JTIRetention, remembering the
// latest denial time dropped (forgotten) for CheckWebsocket. Called with
// d.mu held for writing.
func (d *Denylist) forgetJTIs(now int64) {
	if now < d.nextSweep {
		return
	}
	for j, dn := range d.jtis {
		if now > dn.expiry {
			d.forgotten = max(d.forgotten, dn.at)
			delete(d.jtis, j)
		}
	}
	d.nextSweep = now + 60
}

// JTIDenied reports whether a token with jti issued at iat is covered by a
// live jti denial.
func (d *Denylist) JTIDenied(jti string, iat time.Time) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	dn, ok := d.jtis[jti]
	return ok && iat.Unix() <= dn.at
}

// CheckWebsocket is Check plus the jti denials: a websocket token is
// refused when its user was deauthorized, when its jti was denied after it
// was issued, when it was issued before a full denylist was folded (see
// MaxJTIDenials), or when it lives longer than JTIRetention and was issued
// at or before a denial that has been forgotten (such a token might carry
// that denial's jti).
func (d *Denylist) CheckWebsocket(c *WebsocketClaims) error {
	if err := d.Check(c.ServerUUID, c.UserUUID, c.IssuedAt); err != nil {
		return err
	}
	sec := c.IssuedAt.Unix()
	d.mu.RLock()
	defer d.mu.RUnlock()
	if sec <= d.all {
		return claimErr(ErrDenied, "issued before the token denylist was reset")
	}
	if dn, ok := d.jtis[c.JTI]; ok && sec <= dn.at {
		return claimErr(ErrDenied, "token id denied")
	}
	if sec <= d.forgotten && c.ExpiresAt.Sub(c.IssuedAt) > JTIRetention {
		return claimErr(ErrDenied, "long-lived token issued before a token id denial")
	}
	return nil
}
