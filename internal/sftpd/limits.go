package sftpd

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// errTooManyHandles answers an open beyond system.sftp.max_handles.
var errTooManyHandles = &statusError{sftp.ErrSSHFxFailure, "Too many open files in this session."}

// ---- handles per session ----

// takeHandle reserves one of the session's open handles (files and
// directory listings); release gives it back, once however often it is
// called. Beyond the cap the open is refused rather than attempted.
func (s *session) takeHandle() (release func(), err error) {
	if s.handles.Add(1) > s.maxHandles {
		s.handles.Add(-1)
		return nil, errTooManyHandles
	}
	return sync.OnceFunc(func() { s.handles.Add(-1) }), nil
}

// ---- connections that have not authenticated ----

// pending is an accepted connection that has not authenticated yet.
type pending struct {
	source string
	seq    uint64 // order of arrival
	conn   net.Conn
	gone   bool // released, or closed to make room
}

// startupGate bounds the connections that have not authenticated, per
// source and in all (OpenSSH's MaxStartups), so that a flood of silent
// connections cannot take the daemon's descriptors. When the total is
// full, a connection from a source that holds fewer than the busiest
// source replaces that source's oldest: a flood from a few addresses
// cannot lock everyone else out.
type startupGate struct {
	mu      sync.Mutex
	seq     uint64
	total   int
	sources map[string][]*pending // oldest first
}

func newStartupGate() *startupGate { return &startupGate{sources: map[string][]*pending{}} }

// admit registers nc; nil when it must be closed at once.
func (g *startupGate) admit(nc net.Conn, maxTotal, maxPerSource int) *pending {
	src := sourceOf(nc.RemoteAddr())
	g.mu.Lock()
	defer g.mu.Unlock()
	mine := len(g.sources[src])
	if mine >= maxPerSource {
		return nil
	}
	if g.total >= maxTotal && !g.evictFor(mine) {
		return nil
	}
	g.seq++
	p := &pending{source: src, seq: g.seq, conn: nc}
	g.sources[src] = append(g.sources[src], p)
	g.total++
	return p
}

// evictFor closes the oldest connection of the busiest source when that
// source holds more than mine (ties: the one whose oldest came first).
func (g *startupGate) evictFor(mine int) bool {
	var victim *pending
	most := mine
	for _, ps := range g.sources {
		if len(ps) > most || (victim != nil && len(ps) == most && ps[0].seq < victim.seq) {
			victim, most = ps[0], len(ps)
		}
	}
	if victim == nil {
		return false
	}
	g.remove(victim)
	_ = victim.conn.Close()
	return true
}

// release forgets p: it authenticated, or its connection ended.
func (g *startupGate) release(p *pending) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.remove(p)
}

func (g *startupGate) remove(p *pending) {
	if p.gone {
		return
	}
	p.gone = true
	g.total--
	ps := g.sources[p.source]
	for i, q := range ps {
		if q == p {
			ps = append(ps[:i], ps[i+1:]...)
			break
		}
	}
	if len(ps) == 0 {
		delete(g.sources, p.source)
	} else {
		g.sources[p.source] = ps
	}
}

// sourceOf is the source a connection is counted against: its IPv4
// address, or the /64 of an IPv6 one (one site's prefix: counting each
// of its 2^64 addresses apart would count nothing).
func sourceOf(addr net.Addr) string {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return addr.String()
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return ip.String()
	}
	pfx, err := ip.Prefix(64)
	if err != nil {
		return ip.String()
	}
	return pfx.String()
}

// ---- logged-in connections per server ----

// serverConns counts the logged-in connections of each server.
type serverConns struct {
	mu sync.Mutex
	n  map[string]int
}

func newServerConns() *serverConns { return &serverConns{n: map[string]int{}} }

// take counts one more connection to server; false when it has limit.
func (c *serverConns) take(server string, limit int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[server] >= limit {
		return false
	}
	c.n[server]++
	return true
}

func (c *serverConns) release(server string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[server]--; c.n[server] <= 0 {
		delete(c.n, server)
	}
}

// refuseChannels answers the first channel a refused connection opens with
// why (clients show it), then returns; a client that opens none is given
// up on after wait.
func refuseChannels(nc net.Conn, chans <-chan ssh.NewChannel, wait time.Duration, why string) {
	_ = nc.SetDeadline(time.Now().Add(wait))
	if nch, ok := <-chans; ok {
		_ = nch.Reject(ssh.ResourceShortage, why)
	}
}
