package firewall

import (
	"net/netip"
	"testing"
)

// benchFirewall is a firewall of one bridge with the built-in destinations
// and three of the operator's, in a namespace of the benchmark's own.
func benchFirewall(b *testing.B) *Firewall {
	fd, _ := benchNamespace(b)
	f := New(Options{NetNS: fd, Blocked: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("2001:db8::/32"),
	}})
	if _, err := f.AddBridge(Bridge{Name: "service0", IPv4Subnet: netip.MustParsePrefix("172.18.0.0/16")}); err != nil {
		b.Fatal(err)
	}
	if err := f.Install(); err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkEnsureInPlace is what every server start and installer run pays
// when the rules are in place: one read-back of the chains.
func BenchmarkEnsureInPlace(b *testing.B) {
	f := benchFirewall(b)
	for b.Loop() {
		if err := f.Ensure(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInstall is the boot's install (and a start's after a flush):
// delete and recreate both tables in one batch.
func BenchmarkInstall(b *testing.B) {
	f := benchFirewall(b)
	for b.Loop() {
		if err := f.Install(); err != nil {
			b.Fatal(err)
		}
	}
}
