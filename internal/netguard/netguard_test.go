package netguard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"
)

func TestIsInternal(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"127.0.0.1", true}, {"127.0.0.2", true}, {"10.1.2.3", true}, {"172.16.0.1", true}, {"172.31.255.255", true},
		{"192.168.1.1", true}, {"169.254.169.254", true}, {"100.64.0.1", true}, {"100.127.255.255", true},
		{"198.18.0.1", true}, {"198.19.255.255", true}, {"0.0.0.0", true}, {"224.0.0.1", true}, {"255.255.255.255", true},
		{"::1", true}, {"::", true}, {"fe80::1", true}, {"fc00::1", true}, {"fd12:3456::1", true}, {"ff02::1", true},
		{"::ffff:127.0.0.1", true}, {"::ffff:8.8.8.8", true}, {"64:ff9b::7f00:1", true},
		{"8.8.8.8", false}, {"1.1.1.1", false}, {"172.32.0.1", false}, {"100.128.0.1", false}, {"198.20.0.1", false},
		{"2606:4700:4700::1111", false},
	}
	for _, tt := range tests {
		if got := IsInternal(netip.MustParseAddr(tt.give)); got != tt.want {
			t.Errorf("IsInternal(%s) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

// The check runs on the resolved address: "localhost" is refused as 127.0.0.1 or ::1.
func TestDialChecksResolvedAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	errRefused := errors.New("refused")
	var seen []string
	dial := DialContext(time.Second, func(host, _ string, ip netip.Addr) error {
		seen = append(seen, host+"="+ip.String())
		if IsInternal(ip) {
			return errRefused
		}
		return nil
	})
	_, err := dial(context.Background(), "tcp", net.JoinHostPort("localhost", port))
	if !errors.Is(err, errRefused) {
		t.Fatalf("dial localhost: %v", err)
	}
	if len(seen) == 0 || seen[0][:10] != "localhost=" {
		t.Fatalf("check saw %v", seen)
	}
	ok := DialContext(time.Second, func(string, string, netip.Addr) error { return nil })
	c, err := ok(context.Background(), "tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
