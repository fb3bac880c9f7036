// Package firewall installs Wharf's own nftables rules for the node's
// container bridges (docs/security.md, "Issue 32: neighbours and private
// destinations"): frames between two containers of a bridge are dropped
// unless docker.network.enable_icc, and traffic from the bridge to the
// node's private destinations (link-local, cloud metadata, the operator's
// docker.network.blocked_destinations) is rejected, on the forward hook
// (routed elsewhere) and on the input hook (addresses of the host itself).
//
// The rules live in tables of Wharf's own, one pair per bridge
// (`table bridge wharf_<bridge>`, `table inet wharf_<bridge>`), which the
// engine never flushes. They are written over netlink by
// github.com/google/nftables in one batch (delete and recreate: atomic and
// idempotent) and read back to verify them: no nft or iptables command is
// run, and no command output is parsed.
//
// rules.go builds the objects (pure, unit tested); firewall.go talks to
// the kernel.
package firewall

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// TablePrefix starts the name of every table Wharf installs.
const TablePrefix = "wharf_"

// TableName is the name of both tables (bridge and inet family) of one
// bridge.
func TableName(bridge string) string { return TablePrefix + bridge }

// builtinBlocked are the destinations blocked whatever the configuration:
// the link-local ranges (where every cloud's instance metadata service
// answers, 169.254.169.254 and OpenStack's fe80::a9fe:a9fe) and the
// metadata or platform addresses outside them.
var builtinBlocked = []struct{ prefix, why string }{
	{"169.254.0.0/16", "IPv4 link-local: instance metadata of AWS, GCP, Azure, OCI, DigitalOcean, Hetzner, OpenStack, ..."},
	{"fe80::/10", "IPv6 link-local (neighbour discovery to the host stays allowed)"},
	{"fd00:ec2::254/128", "AWS instance metadata over IPv6"},
	{"fd20:ce::254/128", "GCP metadata server over IPv6"},
	{"fd00:c1::a9fe:a9fe/128", "Oracle Cloud instance metadata over IPv6"},
	{"fd00:42::42/128", "Scaleway instance metadata over IPv6"},
	{"100.100.100.200/32", "Alibaba Cloud instance metadata"},
	{"168.63.129.16/32", "Azure WireServer (platform agent endpoint)"},
}

// BuiltinBlocked returns the destinations the firewall always blocks.
func BuiltinBlocked() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(builtinBlocked))
	for _, b := range builtinBlocked {
		out = append(out, netip.MustParsePrefix(b.prefix))
	}
	return out
}

// Spec is what the firewall enforces on one bridge.
type Spec struct {
	// Bridge is the host interface of the bridge (runtime.NetworkInfo).
	Bridge string
	// AllowICC leaves frames between the bridge's containers alone
	// (docker.network.enable_icc).
	AllowICC bool
	// Blocked are the destinations rejected from the bridge: BuiltinBlocked
	// and the operator's list.
	Blocked []netip.Prefix
	// IPv4Subnet is the bridge's IPv4 subnet: ARP between two of its
	// addresses is dropped unless AllowICC. Not set: no ARP rule.
	IPv4Subnet netip.Prefix
}

// tag is the comment every rule of the spec carries: "wharf" and a digest
// of the spec, so that a verification notices a rule set installed for
// other settings.
func (s Spec) tag() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%t\x00%s\x00", s.Bridge, s.AllowICC, s.IPv4Subnet)
	for _, p := range s.Blocked {
		fmt.Fprintf(h, "%s\x00", p)
	}
	return "wharf " + hex.EncodeToString(h.Sum(nil)[:6])
}

// plan is the objects of one bridge's rules, in the order they are added.
type plan struct {
	tables []*nftables.Table
	chains []*nftables.Chain
	rules  []*nftables.Rule
}

// Chain names.
const (
	chainForward      = "forward"
	chainInput        = "input"
	chainDestinations = "destinations"
	chainReject       = "reject"
)

// bridgeFilterPriority is the bridge family's filter priority
// (NF_BR_PRI_FILTER_BRIDGED).
const bridgeFilterPriority = -200

// build returns the tables, chains and rules of spec. It never fails: the
// spec's values are already parsed.
func build(s Spec) plan {
	var p plan
	tag := s.tag()
	add := func(t *nftables.Table, c *nftables.Chain, what string, exprs ...expr.Any) {
		ud := userdata.AppendString(nil, userdata.TypeComment, tag+" "+what)
		p.rules = append(p.rules, &nftables.Rule{Table: t, Chain: c, Exprs: exprs, UserData: ud})
	}
	name := TableName(s.Bridge)

	// Neighbours, ARP: the bridge family's forward hook sees the frames
	// the bridge passes from one of its ports to another. Bridge ports
	// cannot be matched by their bridge's name on every kernel (meta
	// ibrname needs nft_meta_bridge, which CI's kernel lacks), so ARP
	// between two addresses of the bridge's subnet is what is dropped.
	br := &nftables.Table{Name: name, Family: nftables.TableFamilyBridge}
	fwd := &nftables.Chain{Name: chainForward, Table: br, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(bridgeFilterPriority), Policy: policyRef(nftables.ChainPolicyAccept)}
	p.tables = append(p.tables, br)
	p.chains = append(p.chains, fwd)
	if !s.AllowICC && s.IPv4Subnet.IsValid() && s.IPv4Subnet.Addr().Is4() {
		add(br, fwd, "neighbours arp", matchARP(s.IPv4Subnet)...)
	}

	// Destinations: rejected (a TCP reset, else ICMP administratively
	// prohibited) so that a program fails at once rather than timing out.
	in := &nftables.Table{Name: name, Family: nftables.TableFamilyINet}
	reject := &nftables.Chain{Name: chainReject, Table: in}
	dest := &nftables.Chain{Name: chainDestinations, Table: in}
	ifwd := &nftables.Chain{Name: chainForward, Table: in, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: policyRef(nftables.ChainPolicyAccept)}
	iin := &nftables.Chain{Name: chainInput, Table: in, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: policyRef(nftables.ChainPolicyAccept)}
	p.tables = append(p.tables, in)
	p.chains = append(p.chains, reject, dest, ifwd, iin)

	add(in, reject, "reject tcp",
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
	add(in, reject, "reject",
		&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED})
	for _, d := range s.Blocked {
		add(in, dest, "blocked "+d.String(), append(matchDestination(d), &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictGoto, Chain: chainReject})...)
	}
	if !s.AllowICC {
		// Neighbours, IPv4 and IPv6: br_netfilter passes bridged packets
		// through this hook with the bridge as both interfaces (the
		// engine's own ICC rule is the same match, in iptables only).
		add(in, ifwd, "neighbours", append(append(matchName(expr.MetaKeyIIFNAME, s.Bridge), matchName(expr.MetaKeyOIFNAME, s.Bridge)...),
			&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})...)
	}
	add(in, ifwd, "from bridge", append(matchName(expr.MetaKeyIIFNAME, s.Bridge), &expr.Verdict{Kind: expr.VerdictJump, Chain: chainDestinations})...)
	// Neighbour discovery with the host (its link-local address) stays.
	add(in, iin, "neighbour discovery", append(matchName(expr.MetaKeyIIFNAME, s.Bridge),
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{133}, ToData: []byte{137}},
		&expr.Verdict{Kind: expr.VerdictAccept})...)
	add(in, iin, "from bridge", append(matchName(expr.MetaKeyIIFNAME, s.Bridge), &expr.Verdict{Kind: expr.VerdictJump, Chain: chainDestinations})...)
	return p
}

func policyRef(p nftables.ChainPolicy) *nftables.ChainPolicy { return &p }

// matchName compares an interface name meta key with name (IFNAMSIZ bytes,
// zero padded, as the kernel keeps it).
func matchName(key expr.MetaKey, name string) []expr.Any {
	data := make([]byte, unix.IFNAMSIZ)
	copy(data, name)
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data},
	}
}

// matchDestination matches packets of d's family whose destination address
// is in d.
func matchDestination(d netip.Prefix) []expr.Any {
	proto, offset := byte(unix.NFPROTO_IPV4), uint32(16)
	if d.Addr().Is6() {
		proto, offset = unix.NFPROTO_IPV6, 24
	}
	addr := d.Addr().AsSlice()
	out := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: uint32(len(addr))},
	}
	if d.Bits() < len(addr)*8 {
		out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(len(addr)), Mask: mask(d.Bits(), len(addr)), Xor: make([]byte, len(addr))})
	}
	return append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: d.Masked().Addr().AsSlice()})
}

// matchARP matches forwarded ARP frames whose sender and target addresses
// are both in subnet, and drops them.
func matchARP(subnet netip.Prefix) []expr.Any {
	out := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0x08, 0x06}},
	}
	// Sender protocol address at 14, target at 24 (after the hardware
	// and protocol types, lengths, operation and sender hardware address).
	for _, off := range []uint32{14, 24} {
		out = append(out, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4})
		if subnet.Bits() < 32 {
			out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask(subnet.Bits(), 4), Xor: make([]byte, 4)})
		}
		out = append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: subnet.Masked().Addr().AsSlice()})
	}
	return append(out, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
}

// mask is a network mask of bits ones in n bytes.
func mask(bits, n int) []byte {
	m := make([]byte, n)
	for i := range m {
		switch {
		case bits >= 8:
			m[i] = 0xff
			bits -= 8
		case bits > 0:
			m[i] = byte(0xff << (8 - bits))
			bits = 0
		}
	}
	return m
}

// comments lists the comments of a plan's rules, in order, per chain
// ("family table chain"): what a verification expects to read back.
func (p plan) comments() map[string][]string {
	out := map[string][]string{}
	for _, c := range p.chains {
		out[chainKey(c.Table, c.Name)] = []string{}
	}
	for _, r := range p.rules {
		k := chainKey(r.Table, r.Chain.Name)
		c, _ := userdata.GetString(r.UserData, userdata.TypeComment)
		out[k] = append(out[k], c)
	}
	return out
}

func chainKey(t *nftables.Table, chain string) string {
	return fmt.Sprintf("%s %s %s", familyName(t.Family), t.Name, chain)
}

func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyBridge:
		return "bridge"
	case nftables.TableFamilyINet:
		return "inet"
	}
	return fmt.Sprintf("family%d", f)
}
