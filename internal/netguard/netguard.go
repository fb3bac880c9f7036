// Package netguard checks the address of every outbound connection the
// node makes on a user's or the panel's behalf (remote downloads, restore
// downloads) at dial time: after DNS resolution, on the address actually
// connected to, so that a name that resolves (or rebinds) to an internal
// address, or a redirect to one, is refused.
package netguard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// Check decides whether a connection to ip may be made. host and port are
// what the caller asked to dial (a name or a literal address).
type Check func(host, port string, ip netip.Addr) error

// DialContext returns a dial function for http.Transport that runs check on
// each connection's resolved address just before it connects.
func DialContext(timeout time.Duration, check Check) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		d := &net.Dialer{
			Timeout: timeout,
			ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
				h, _, err := net.SplitHostPort(address)
				if err != nil {
					return err
				}
				ip, err := netip.ParseAddr(h)
				if err != nil {
					return fmt.Errorf("dialling a non-IP address %q", h)
				}
				return check(host, port, ip.WithZone(""))
			},
		}
		return d.DialContext(ctx, network, addr)
	}
}

// internal are the ranges a user-driven download may never reach: this
// host, private networks, link-local (cloud metadata), CGNAT, benchmarking,
// IETF protocol assignments, multicast, reserved and broadcast, and their
// IPv6 counterparts.
var internal = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
}

// IsInternal reports whether ip is in a range a user-driven download may
// not reach. An IPv4-mapped IPv6 address is internal whatever it maps to
// (no public service needs to be reached that way).
func IsInternal(ip netip.Addr) bool {
	if ip.Is4In6() {
		return true
	}
	for _, p := range internal {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
