package firewall

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
)

// Options configure a Firewall.
type Options struct {
	// AllowICC is docker.network.enable_icc.
	AllowICC bool
	// Blocked are the operator's destinations
	// (docker.network.blocked_destinations), added to BuiltinBlocked.
	Blocked []netip.Prefix
	// NetNS, when not zero, is a descriptor of the network namespace whose
	// rules are managed (tests); zero is the daemon's own namespace.
	NetNS int
	// ProcSysBridge is where the br_netfilter sysctls are
	// (/proc/sys/net/bridge when empty; tests).
	ProcSysBridge string
	// Log receives the firewall's notes; nothing is logged when nil.
	Log *slog.Logger
}

// Firewall keeps the rules of the node's bridges installed. Its methods
// are safe for concurrent use. It starts no goroutine and holds no open
// socket between calls.
type Firewall struct {
	opts    Options
	blocked []netip.Prefix

	mu      sync.Mutex
	bridges []Bridge
}

// Bridge is one bridge the firewall covers.
type Bridge struct {
	Name       string       // host interface
	IPv4Subnet netip.Prefix // for the ARP rule; may be unset
}

// New returns a firewall for no bridge yet (AddBridge).
func New(opts Options) *Firewall {
	blocked := BuiltinBlocked()
	for _, p := range opts.Blocked {
		if !slices.Contains(blocked, p.Masked()) {
			blocked = append(blocked, p.Masked())
		}
	}
	return &Firewall{opts: opts, blocked: blocked}
}

// maxIfName is the longest interface name Linux accepts (IFNAMSIZ - 1).
const maxIfName = 15

// AddBridge adds a bridge to the ones the firewall covers, or updates its
// subnet; it reports whether anything changed. Its rules are installed by
// the next Install or Ensure.
func (f *Firewall) AddBridge(b Bridge) (bool, error) {
	if b.Name == "" || len(b.Name) > maxIfName || strings.ContainsAny(b.Name, "/ \x00") {
		return false, fmt.Errorf("firewall: %q is not a network interface name", b.Name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, have := range f.bridges {
		if have.Name == b.Name {
			if have == b || !b.IPv4Subnet.IsValid() {
				return false, nil
			}
			f.bridges[i] = b
			return true, nil
		}
	}
	f.bridges = append(f.bridges, b)
	return true, nil
}

// Bridges lists the bridges covered.
func (f *Firewall) Bridges() []Bridge {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.bridges)
}

// Blocked lists the destinations rejected (built-in and the operator's).
func (f *Firewall) Blocked() []netip.Prefix { return slices.Clone(f.blocked) }

// AllowICC reports docker.network.enable_icc as the firewall applies it.
func (f *Firewall) AllowICC() bool { return f.opts.AllowICC }

func (f *Firewall) spec(b Bridge) Spec {
	return Spec{Bridge: b.Name, AllowICC: f.opts.AllowICC, Blocked: f.blocked, IPv4Subnet: b.IPv4Subnet.Masked()}
}

func (f *Firewall) conn() (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	if f.opts.NetNS != 0 {
		opts = append(opts, nftables.WithNetNSFd(f.opts.NetNS))
	}
	return nftables.New(opts...)
}

// Install deletes and recreates the tables of every bridge in one netlink
// batch: the kernel applies all of it or nothing. Wharf's tables of
// bridges that no longer exist (a removed per-IP network, another node's
// removed network) are deleted first: they protect nothing.
func (f *Firewall) Install() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.pruneLocked(); err != nil {
		return err
	}
	return f.installLocked(f.bridges)
}

// pruneLocked deletes the tables named after a bridge interface that does
// not exist. Not for another namespace than the daemon's (its interfaces
// are not visible here).
func (f *Firewall) pruneLocked() error {
	if f.opts.NetNS != 0 {
		return nil
	}
	c, err := f.conn()
	if err != nil {
		return fmt.Errorf("firewall: netlink: %w", err)
	}
	var stale []*nftables.Table
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyINet, nftables.TableFamilyBridge} {
		tables, err := c.ListTablesOfFamily(fam)
		if err != nil {
			return fmt.Errorf("firewall: listing the %s tables: %w", familyName(fam), err)
		}
		for _, t := range tables {
			bridge, ok := strings.CutPrefix(t.Name, TablePrefix)
			if !ok || bridge == "" {
				continue
			}
			if _, err := net.InterfaceByName(bridge); err != nil && strings.Contains(err.Error(), "no such network interface") {
				stale = append(stale, t)
			}
		}
	}
	if len(stale) == 0 {
		return nil
	}
	for _, t := range stale {
		c.DelTable(t)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("firewall: deleting the tables of removed bridges: %w", err)
	}
	if f.opts.Log != nil {
		for _, t := range stale {
			f.opts.Log.Info("deleted the firewall table of a bridge that no longer exists", "family", familyName(t.Family), "table", t.Name)
		}
	}
	return nil
}

func (f *Firewall) installLocked(bridges []Bridge) error {
	if len(bridges) == 0 {
		return nil
	}
	if err := f.bridgeNetfilter(); err != nil {
		return err
	}
	c, err := f.conn()
	if err != nil {
		return fmt.Errorf("firewall: netlink: %w", err)
	}
	for _, b := range bridges {
		p := build(f.spec(b))
		for _, t := range p.tables {
			// Adding first makes the delete succeed on a fresh host.
			c.AddTable(t)
			c.DelTable(t)
			c.AddTable(t)
		}
		for _, ch := range p.chains {
			c.AddChain(ch)
		}
		for _, r := range p.rules {
			c.AddRule(r)
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("firewall: installing the nftables rules of %s: %w", names(bridges), err)
	}
	return nil
}

// Ensure verifies the rules of every bridge and reinstalls those of the
// bridges whose rules are missing or differ (a `nft flush ruleset`, a host
// reboot, other settings). It returns nil only when every bridge's rules
// are in place, verified after the reinstall.
func (f *Firewall) Ensure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var stale []Bridge
	for _, b := range f.bridges {
		if err := f.verifyLocked(b); err != nil {
			stale = append(stale, b)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	if err := f.installLocked(stale); err != nil {
		return err
	}
	var errs []error
	for _, b := range stale {
		errs = append(errs, f.verifyLocked(b))
	}
	return errors.Join(errs...)
}

// Verify reports, for each bridge, whether its rules are in place as this
// firewall would install them; nil when they all are.
func (f *Firewall) Verify() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for _, b := range f.bridges {
		errs = append(errs, f.verifyLocked(b))
	}
	return errors.Join(errs...)
}

// verifyLocked reads back the chains of one bridge's tables and compares
// their rules' comments (which carry a digest of the settings) with the
// plan's.
func (f *Firewall) verifyLocked(bridge Bridge) error {
	if err := f.bridgeNetfilter(); err != nil {
		return err
	}
	c, err := f.conn()
	if err != nil {
		return fmt.Errorf("firewall: netlink: %w", err)
	}
	p := build(f.spec(bridge))
	want := p.comments()
	have := map[string]bool{}
	for _, t := range p.tables {
		chains, err := c.ListChainsOfTableFamily(t.Family)
		if err != nil {
			return fmt.Errorf("firewall: listing the %s chains: %w", familyName(t.Family), err)
		}
		for _, ch := range chains {
			have[chainKey(ch.Table, ch.Name)] = true
		}
	}
	for _, ch := range p.chains {
		k := chainKey(ch.Table, ch.Name)
		if !have[k] {
			return fmt.Errorf("firewall: chain %s is not installed", k)
		}
		rules, err := c.GetRules(ch.Table, ch)
		if err != nil {
			return fmt.Errorf("firewall: %s: not installed (%w)", k, err)
		}
		got := make([]string, 0, len(rules))
		for _, r := range rules {
			s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
			got = append(got, s)
		}
		if !slices.Equal(got, want[k]) {
			return fmt.Errorf("firewall: %s: %d rules %q, want %q", k, len(got), got, want[k])
		}
	}
	return nil
}

// Remove deletes the tables of every bridge (tests, and an operator who
// turns the firewall off: docs/security.md). Tables already gone are not
// an error.
func (f *Firewall) Remove() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.conn()
	if err != nil {
		return fmt.Errorf("firewall: netlink: %w", err)
	}
	for _, b := range f.bridges {
		for _, t := range build(f.spec(b)).tables {
			c.AddTable(t)
			c.DelTable(t)
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("firewall: removing the nftables rules: %w", err)
	}
	return nil
}

func names(bs []Bridge) string {
	out := make([]string, 0, len(bs))
	for _, b := range bs {
		out = append(out, b.Name)
	}
	return strings.Join(out, ", ")
}

// bridgeNetfilterKnobs are the sysctls through which br_netfilter passes
// bridged IPv4 and IPv6 packets to the inet forward hook, where the
// neighbour rule is.
var bridgeNetfilterKnobs = []string{"bridge-nf-call-iptables", "bridge-nf-call-ip6tables"}

// bridgeNetfilter checks, when neighbours are to be isolated, that
// br_netfilter passes bridged packets to nftables, turning a knob that is
// off on (the kernel's default is on; the engine needs the IPv4 one
// itself). Not checked for another namespace than the daemon's.
func (f *Firewall) bridgeNetfilter() error {
	if f.opts.AllowICC || f.opts.NetNS != 0 {
		return nil
	}
	dir := f.opts.ProcSysBridge
	if dir == "" {
		dir = "/proc/sys/net/bridge"
	}
	for _, k := range bridgeNetfilterKnobs {
		p := filepath.Join(dir, k)
		v, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("firewall: %s does not exist: the br_netfilter module is not loaded (modprobe br_netfilter; the engine loads it at start)", p)
		}
		if err != nil {
			return fmt.Errorf("firewall: %w", err)
		}
		if strings.TrimSpace(string(v)) == "1" {
			continue
		}
		if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
			return fmt.Errorf("firewall: %s is off and cannot be turned on: %w", p, err)
		}
		if f.opts.Log != nil {
			f.opts.Log.Warn("turned a bridge netfilter knob on: bridged packets must reach the firewall's neighbour rule", "sysctl", p)
		}
	}
	return nil
}
