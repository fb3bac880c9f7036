package firewall

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

func rulesOf(p plan, family nftables.TableFamily, chain string) []*nftables.Rule {
	var out []*nftables.Rule
	for _, r := range p.rules {
		if r.Table.Family == family && r.Chain.Name == chain {
			out = append(out, r)
		}
	}
	return out
}

func hasVerdict(r *nftables.Rule, kind expr.VerdictKind, chain string) bool {
	for _, e := range r.Exprs {
		if v, ok := e.(*expr.Verdict); ok && v.Kind == kind && v.Chain == chain {
			return true
		}
	}
	return false
}

// matchesName reports whether the rule compares the meta key with the
// bridge's name.
func matchesName(r *nftables.Rule, key expr.MetaKey, name string) bool {
	want := make([]byte, unix.IFNAMSIZ)
	copy(want, name)
	for i, e := range r.Exprs {
		m, ok := e.(*expr.Meta)
		if !ok || m.Key != key || i+1 >= len(r.Exprs) {
			continue
		}
		if c, ok := r.Exprs[i+1].(*expr.Cmp); ok && c.Op == expr.CmpOpEq && bytes.Equal(c.Data, want) {
			return true
		}
	}
	return false
}

func TestNeighboursAreDroppedUnlessICC(t *testing.T) {
	v4 := netip.MustParsePrefix("172.18.0.0/16")
	p := build(Spec{Bridge: "service0", Blocked: BuiltinBlocked(), IPv4Subnet: v4})
	fwd := rulesOf(p, nftables.TableFamilyINet, chainForward)
	if len(fwd) != 2 || !hasVerdict(fwd[0], expr.VerdictDrop, "") || !matchesName(fwd[0], expr.MetaKeyIIFNAME, "service0") || !matchesName(fwd[0], expr.MetaKeyOIFNAME, "service0") {
		t.Fatalf("inet forward rules = %+v, want first a drop of packets from service0 to service0", fwd)
	}
	arp := rulesOf(p, nftables.TableFamilyBridge, chainForward)
	if len(arp) != 1 || !hasVerdict(arp[0], expr.VerdictDrop, "") {
		t.Fatalf("bridge forward rules = %+v, want one ARP drop", arp)
	}
	var offsets []uint32
	for _, e := range arp[0].Exprs {
		if pl, ok := e.(*expr.Payload); ok {
			offsets = append(offsets, pl.Offset)
		}
	}
	if len(offsets) != 2 || offsets[0] != 14 || offsets[1] != 24 {
		t.Errorf("ARP rule reads offsets %v, want the sender (14) and target (24) addresses", offsets)
	}

	p = build(Spec{Bridge: "service0", AllowICC: true, Blocked: BuiltinBlocked(), IPv4Subnet: v4})
	if arp := rulesOf(p, nftables.TableFamilyBridge, chainForward); len(arp) != 0 {
		t.Fatalf("with enable_icc the bridge forward chain has %d rules, want none", len(arp))
	}
	if fwd := rulesOf(p, nftables.TableFamilyINet, chainForward); len(fwd) != 1 || hasVerdict(fwd[0], expr.VerdictDrop, "") {
		t.Fatalf("with enable_icc the inet forward chain = %+v, want only the destinations jump", fwd)
	}
	// The chain exists either way, so that a verification sees the table.
	found := false
	for _, c := range p.chains {
		found = found || c.Table.Family == nftables.TableFamilyBridge && c.Name == chainForward && *c.Hooknum == *nftables.ChainHookForward
	}
	if !found {
		t.Error("no bridge forward chain with enable_icc")
	}
}

func TestEveryBlockedDestinationHasARule(t *testing.T) {
	operator := netip.MustParsePrefix("10.99.0.0/16")
	blocked := append(BuiltinBlocked(), operator, netip.MustParsePrefix("2001:db8::/32"))
	p := build(Spec{Bridge: "br-0123456789ab", Blocked: blocked})
	dest := rulesOf(p, nftables.TableFamilyINet, chainDestinations)
	if len(dest) != len(blocked) {
		t.Fatalf("%d destination rules for %d destinations", len(dest), len(blocked))
	}
	for i, d := range blocked {
		r := dest[i]
		if !hasVerdict(r, expr.VerdictGoto, chainReject) {
			t.Errorf("%s: no goto reject", d)
		}
		var pl *expr.Payload
		var last *expr.Cmp
		var bw *expr.Bitwise
		for _, e := range r.Exprs {
			switch e := e.(type) {
			case *expr.Payload:
				pl = e
			case *expr.Cmp:
				last = e
			case *expr.Bitwise:
				bw = e
			}
		}
		wantOff, wantLen := uint32(16), uint32(4)
		if d.Addr().Is6() {
			wantOff, wantLen = 24, 16
		}
		if pl == nil || pl.Base != expr.PayloadBaseNetworkHeader || pl.Offset != wantOff || pl.Len != wantLen {
			t.Errorf("%s: payload %+v, want the destination address (offset %d, %d bytes)", d, pl, wantOff, wantLen)
		}
		if !bytes.Equal(last.Data, d.Addr().AsSlice()) {
			t.Errorf("%s: compared with %v", d, last.Data)
		}
		if full := d.Bits() == d.Addr().BitLen(); full != (bw == nil) {
			t.Errorf("%s: mask %+v", d, bw)
		}
	}
	// Both hooks send the bridge's traffic through the destinations (the
	// ICC rule is not there without a subnet: ARP only needs it).
	for _, hook := range []string{chainForward, chainInput} {
		rs := rulesOf(p, nftables.TableFamilyINet, hook)
		last := rs[len(rs)-1]
		if !hasVerdict(last, expr.VerdictJump, chainDestinations) || !matchesName(last, expr.MetaKeyIIFNAME, "br-0123456789ab") {
			t.Errorf("inet %s: last rule %+v does not send the bridge's traffic to the destinations", hook, last)
		}
	}
	// Neighbour discovery with the host is accepted before that on input.
	in := rulesOf(p, nftables.TableFamilyINet, chainInput)
	if len(in) != 2 || !hasVerdict(in[0], expr.VerdictAccept, "") {
		t.Errorf("inet input rules = %+v, want the neighbour discovery accept first", in)
	}
}

func TestMask(t *testing.T) {
	for _, c := range []struct {
		bits, n int
		want    []byte
	}{
		{16, 4, []byte{255, 255, 0, 0}},
		{10, 16, append([]byte{255, 0xc0}, make([]byte, 14)...)},
		{0, 4, []byte{0, 0, 0, 0}},
		{29, 4, []byte{255, 255, 255, 0xf8}},
	} {
		if got := mask(c.bits, c.n); !bytes.Equal(got, c.want) {
			t.Errorf("mask(%d, %d) = %v, want %v", c.bits, c.n, got, c.want)
		}
	}
}

// TestCommentsCarryTheSettings: a rule set installed for other settings
// (ICC, destinations) is told apart from the wanted one.
func TestCommentsCarryTheSettings(t *testing.T) {
	base := Spec{Bridge: "service0", Blocked: BuiltinBlocked()}
	icc := base
	icc.AllowICC = true
	more := base
	more.Blocked = append(BuiltinBlocked(), netip.MustParsePrefix("10.0.0.0/8"))
	other := base
	other.Bridge = "service1"
	seen := map[string]bool{}
	for _, s := range []Spec{base, icc, more, other} {
		tag := s.tag()
		if seen[tag] || !strings.HasPrefix(tag, "wharf ") {
			t.Errorf("tag %q of %+v is not distinct", tag, s)
		}
		seen[tag] = true
	}
	if base.tag() != (Spec{Bridge: "service0", Blocked: BuiltinBlocked()}).tag() {
		t.Error("the tag is not stable")
	}
}

func TestNewAddsTheOperatorsDestinationsOnce(t *testing.T) {
	f := New(Options{Blocked: []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("192.0.2.0/24")}})
	got := f.Blocked()
	if len(got) != len(BuiltinBlocked())+1 || got[len(got)-1] != netip.MustParsePrefix("192.0.2.0/24") {
		t.Errorf("blocked = %v", got)
	}
	for _, bad := range []string{"", "a-name-longer-than-15", "a/b"} {
		if _, err := f.AddBridge(Bridge{Name: bad}); err == nil {
			t.Errorf("AddBridge(%q) accepted", bad)
		}
	}
	if added, err := f.AddBridge(Bridge{Name: "service0"}); !added || err != nil {
		t.Errorf("AddBridge = %v, %v", added, err)
	}
	if added, _ := f.AddBridge(Bridge{Name: "service0"}); added {
		t.Error("the same bridge was added twice")
	}
	v4 := netip.MustParsePrefix("172.18.0.0/16")
	if added, _ := f.AddBridge(Bridge{Name: "service0", IPv4Subnet: v4}); !added || f.Bridges()[0].IPv4Subnet != v4 || len(f.Bridges()) != 1 {
		t.Errorf("the subnet of a known bridge was not updated: %+v", f.Bridges())
	}
}

// TestBridgeNetfilterKnobs: a knob that is off is turned on; a missing
// br_netfilter is an error that says how to load it; with ICC nothing is
// needed.
func TestBridgeNetfilterKnobs(t *testing.T) {
	dir := t.TempDir()
	f := New(Options{ProcSysBridge: dir})
	if err := f.bridgeNetfilter(); err == nil || !strings.Contains(err.Error(), "modprobe br_netfilter") {
		t.Fatalf("without br_netfilter: %v", err)
	}
	for _, k := range bridgeNetfilterKnobs {
		if err := os.WriteFile(filepath.Join(dir, k), []byte("0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.bridgeNetfilter(); err != nil {
		t.Fatal(err)
	}
	for _, k := range bridgeNetfilterKnobs {
		if v, _ := os.ReadFile(filepath.Join(dir, k)); strings.TrimSpace(string(v)) != "1" {
			t.Errorf("%s = %q, want 1", k, v)
		}
	}
	if err := New(Options{ProcSysBridge: t.TempDir(), AllowICC: true}).bridgeNetfilter(); err != nil {
		t.Errorf("with enable_icc: %v", err)
	}
}
