package transfer

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// linkProbeEvery is how often the kernel is asked what holds the stream
// back; between two questions the last answer stands.
const linkProbeEvery = 200 * time.Millisecond

// linkProbe tells, from the kernel's TCP_INFO of the stream's connection,
// whether the network holds the stream back (then compressing it is worth
// the CPU) rather than the receiver (its window full: compressing only adds
// work at both ends) or nothing at all.
type linkProbe struct {
	conn atomic.Pointer[net.TCPConn]

	mu      sync.Mutex
	last    unix.TCPInfo
	lastAt  time.Time
	verdict bool
}

// limitedByLink compares the time the connection spent sending (busy)
// over the last interval with the time the receiver's window or the local
// send buffer held it back; the rest is the congestion window, the
// network. A receiver that cannot keep up closes its window only part of
// the time (on loopback a reader at a tenth of the sender's speed shows
// about 20 % of the busy time as window-limited), while a saturated
// network with a fast receiver shows next to none: the link is the limit
// when the connection was busy nearly all the interval and held back by
// the receiver or the buffer for less than a tenth of it.
func (p *linkProbe) limitedByLink() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.lastAt) < linkProbeEvery {
		return p.verdict
	}
	info, ok := p.info()
	if !ok {
		return p.verdict
	}
	if !p.lastAt.IsZero() {
		busy := info.Busy_time - p.last.Busy_time
		held := (info.Rwnd_limited - p.last.Rwnd_limited) + (info.Sndbuf_limited - p.last.Sndbuf_limited)
		span := uint64(time.Since(p.lastAt).Microseconds())
		p.verdict = busy >= span*9/10 && held < busy/10
	}
	p.last, p.lastAt = *info, time.Now()
	return p.verdict
}

func (p *linkProbe) info() (*unix.TCPInfo, bool) {
	c := p.conn.Load()
	if c == nil {
		return nil, false
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, false
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || ierr != nil {
		return nil, false
	}
	return info, true
}

// liveClient returns the client of one live stream: its own connection,
// watched by the returned probe. A client whose transport is not an
// *http.Transport (tests may set one) is used as it is, without a probe.
func (svc *Service) liveClient() (*http.Client, func() bool) {
	base, ok := svc.opts.Client.Transport.(*http.Transport)
	if !ok {
		if svc.opts.Client.Transport != nil {
			return svc.opts.Client, nil
		}
		base = http.DefaultTransport.(*http.Transport)
	}
	tr := base.Clone()
	probe := &linkProbe{}
	dial := tr.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if tcp, ok := conn.(*net.TCPConn); ok && err == nil {
			probe.conn.Store(tcp)
		}
		return conn, err
	}
	c := *svc.opts.Client
	c.Transport = tr
	return &c, probe.limitedByLink
}
