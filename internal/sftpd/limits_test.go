package sftpd

import (
	"net"
	"testing"
)

// fakeConn is a connection from a given address that records its Close.
type fakeConn struct {
	net.Conn
	addr   net.Addr
	closed bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.addr }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

func connFrom(ip string) *fakeConn {
	return &fakeConn{addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
}

func TestStartupGatePerSourceAndTotal(t *testing.T) {
	g := newStartupGate()
	var first []*pending
	for i := range 3 {
		p := g.admit(connFrom("192.0.2.1"), 5, 3)
		if p == nil {
			t.Fatalf("connection %d of a source under its cap refused", i)
		}
		first = append(first, p)
	}
	if g.admit(connFrom("192.0.2.1"), 5, 3) != nil {
		t.Fatal("a fourth connection from one source admitted (cap 3)")
	}
	// Released (logged in or gone): the source may connect again.
	g.release(first[0])
	g.release(first[0]) // twice is once
	if g.admit(connFrom("192.0.2.1"), 5, 3) == nil {
		t.Fatal("a released slot was not given back")
	}
	// The same /64 is one IPv6 source; another /64 is another.
	for range 2 {
		if g.admit(connFrom("2001:db8:1:2::a"), 5, 3) == nil {
			t.Fatal("IPv6 source under its cap refused")
		}
	}
	if g.total != 5 {
		t.Fatalf("total %d, want 5", g.total)
	}
	// Full: a source holding nothing takes the place of the busiest's
	// oldest connection, which is closed.
	oldest := first[1]
	p := g.admit(connFrom("198.51.100.7"), 5, 3)
	if p == nil || !oldest.conn.(*fakeConn).closed || !oldest.gone {
		t.Fatalf("a new source was not admitted in place of the busiest's oldest (admitted %v, oldest closed %v)", p != nil, oldest.conn.(*fakeConn).closed)
	}
	if g.total != 5 || len(g.sources["192.0.2.1"]) != 2 {
		t.Fatalf("total %d, busiest holds %d after the swap", g.total, len(g.sources["192.0.2.1"]))
	}
	g.release(oldest) // its goroutine's release after the eviction changes nothing
	if g.total != 5 {
		t.Fatalf("a late release of an evicted connection changed the total to %d", g.total)
	}
	// A source as busy as the busiest gets no one's place.
	if g.admit(connFrom("2001:db8:1:2:ffff::1"), 5, 3) != nil {
		t.Fatal("a source holding 2 took the place of one holding 2")
	}
}

func TestSourceOf(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.1":        "192.0.2.1",
		"::ffff:192.0.2.1": "192.0.2.1",
		"2001:db8:1:2::a":  "2001:db8:1:2::/64",
		"2001:db8:1:3::a":  "2001:db8:1:3::/64",
	} {
		if got := sourceOf(&net.TCPAddr{IP: net.ParseIP(addr), Port: 1}); got != want {
			t.Errorf("sourceOf(%s) = %s, want %s", addr, got, want)
		}
	}
}

func TestTakeHandleCapsAndReleasesOnce(t *testing.T) {
	s := &session{maxHandles: 2}
	r1, err := s.takeHandle()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.takeHandle(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.takeHandle(); err != errTooManyHandles {
		t.Fatalf("third handle of 2: %v", err)
	}
	r1()
	r1() // a second close gives nothing more back
	if _, err := s.takeHandle(); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := s.takeHandle(); err != errTooManyHandles {
		t.Fatalf("a double release gave two handles back: %v", err)
	}
}
