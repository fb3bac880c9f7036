package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// Issue 32, items 1 and 2: the game process is a hostile tenant. It runs
// portprobe (internal/testutil/portprobe), a static binary uploaded through
// the file manager as a customer would and started from the server's
// console (the server's "game" is a busybox shell).

// netTestTag is a random tag for the names of one test's network objects.
func netTestTag(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testNetwork is a node network of the test's own: its own bridge (so that
// its firewall tables are the test's), subnets and IPv6.
type testNetwork struct {
	Name, Bridge   string
	V4, V6         netip.Prefix
	Gate4, Gate6   netip.Addr
	BlockedByTests []string
}

// newTestNetwork picks the names and subnets and registers the cleanup of
// the engine's network and of the firewall tables: registered before the
// servers and the node, it runs after they are gone.
func newTestNetwork(t *testing.T) testNetwork {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft (to look at and delete the firewall's tables)")
	}
	tag := netTestTag(t)
	b, _ := hex.DecodeString(tag)
	nw := testNetwork{
		Name:   "wharf-nr-" + tag,
		Bridge: "wnr" + tag,
		V4:     netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 208+int(b[0]%8), b[1])),
		V6:     netip.MustParsePrefix(fmt.Sprintf("fd%02x:%02x%02x:%02x00::/64", b[0], b[1], b[2], b[3])),
	}
	nw.Gate4 = nw.V4.Addr().Next()
	nw.Gate6 = nw.V6.Addr().Next()
	cli := testimages.Client(t)
	t.Cleanup(func() {
		_, _ = cli.NetworkRemove(context.Background(), nw.Name, client.NetworkRemoveOptions{})
		for _, fam := range []string{"inet", "bridge"} {
			_ = exec.Command("nft", "delete", "table", fam, "wharf_"+nw.Bridge).Run()
		}
	})
	return nw
}

// apply puts the node on the network.
func (nw testNetwork) apply(c *config.Config) {
	n := &c.Docker.Network
	n.Name, n.Mode, n.BridgeName = nw.Name, nw.Name, nw.Bridge
	n.EnableIPv6 = true
	n.Interface = nw.Gate4.String()
	n.Interfaces.V4 = config.Subnet{Subnet: nw.V4.String(), Gateway: nw.Gate4.String()}
	n.Interfaces.V6 = config.Subnet{Subnet: nw.V6.String(), Gateway: nw.Gate6.String()}
	n.BlockedDestinations = nw.BlockedByTests
}

// nftTables lists what nft prints of the bridge's two tables ("" for a
// missing one).
func (nw testNetwork) nftTables(t *testing.T) string {
	var b strings.Builder
	for _, fam := range []string{"inet", "bridge"} {
		out, _ := exec.Command("nft", "list", "table", fam, "wharf_"+nw.Bridge).CombinedOutput()
		b.Write(out)
	}
	return b.String()
}

// deleteTables deletes the firewall's tables behind the daemon's back (as
// `nft flush ruleset` or a host reboot would).
func (nw testNetwork) deleteTables(t *testing.T) {
	t.Helper()
	nw.deleteTablesMaybe(t, false)
}

// deleteTablesMaybe deletes the bridge's tables; with gone allowed, a table
// that is not there is fine (on Podman the bridge, and with it Wharf's
// table, goes away when its last container ends).
func (nw testNetwork) deleteTablesMaybe(t *testing.T, gone bool) {
	t.Helper()
	for _, fam := range []string{"inet", "bridge"} {
		out, err := exec.Command("nft", "delete", "table", fam, "wharf_"+nw.Bridge).CombinedOutput()
		if err != nil && !(gone && strings.Contains(string(out), "No such file or directory")) {
			t.Fatalf("nft delete table %s: %v: %s", fam, err, out)
		}
	}
}

var (
	portprobeOnce sync.Once
	portprobePath string
	portprobeErr  error
)

// portprobe builds the probe once, statically.
func portprobe(t *testing.T) string {
	t.Helper()
	portprobeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "wharf-portprobe-")
		if err != nil {
			portprobeErr = err
			return
		}
		portprobePath = filepath.Join(dir, "portprobe")
		cmd := exec.Command("go", "build", "-o", portprobePath, "github.com/wharf/wharf/internal/testutil/portprobe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			portprobeErr = fmt.Errorf("build portprobe: %v\n%s", err, out)
		}
	})
	if portprobeErr != nil {
		t.Fatal(portprobeErr)
	}
	return portprobePath
}

// shellServer is a server whose game is a busybox shell reading the
// console: what a customer who replaced the game by their own program has.
func portShellServer(t *testing.T, published int) devpanel.Server {
	t.Helper()
	testimages.Busybox(context.Background(), t)
	s := newGameServer(t)
	s.Settings["container"] = map[string]any{"image": "~" + testimages.BusyboxTag}
	s.Settings["invocation"] = "sh"
	s.ProcessConfiguration["startup"] = map[string]any{"done": []string{"shell-ready"}}
	s.ProcessConfiguration["stop"] = map[string]any{"type": "command", "value": "exit"}
	if published != 0 {
		s.Settings["allocations"] = map[string]any{
			"default":  map[string]any{"ip": "0.0.0.0", "port": published},
			"mappings": map[string]any{"0.0.0.0": []int{published}},
		}
	}
	return s
}

// waitShells waits until each shell server's process reads its console:
// "shell-ready" echoed back is the done line that makes it running.
func (n *node) waitShells(t *testing.T, servers ...devpanel.Server) {
	t.Helper()
	for _, s := range servers {
		// The echo is sent again only when the last one has had a few
		// seconds: the shell may not read its console yet, and a busy
		// engine must not be flooded with attach writes.
		var sent time.Time
		ok := wait.Until(90*time.Second, func() bool {
			if n.details(s.UUID)["state"] == "running" {
				return true
			}
			if time.Since(sent) > 3*time.Second {
				sent = time.Now()
				n.request("POST", "/api/servers/"+s.UUID+"/commands", map[string]any{"commands": []string{"echo shell-ready"}}, "")
			}
			return false
		})
		if !ok {
			t.Fatalf("the shell of %s never answered:\n%s\n\ndaemon log:\n%s", s.UUID, strings.Join(n.logs(s.UUID), "\n"), n.log)
		}
	}
}

// uploadProbe writes portprobe into the server's directory through the file
// manager and makes it executable, as the server's owner would.
func (n *node) uploadProbe(t *testing.T, id string) {
	t.Helper()
	data, err := os.ReadFile(portprobe(t))
	if err != nil {
		t.Fatal(err)
	}
	if res, body := n.request("POST", "/api/servers/"+id+"/files/write?file=%2Fportprobe", data, ""); res.StatusCode != 204 && res.StatusCode != 200 {
		t.Fatalf("upload portprobe: %d %s", res.StatusCode, body)
	}
	chmod := map[string]any{"root": "/", "files": []map[string]string{{"file": "portprobe", "mode": "755"}}}
	if res, body := n.request("POST", "/api/servers/"+id+"/files/chmod", chmod, ""); res.StatusCode != 204 && res.StatusCode != 200 {
		t.Fatalf("chmod portprobe: %d %s", res.StatusCode, body)
	}
}

// dialFrom runs portprobe dial in the server's console and returns, per
// address, its result line ("OK ..." or "ERR ...").
func (n *node) dialFrom(t *testing.T, id, tag string, addrs ...string) map[string]string {
	t.Helper()
	n.command(id, "./portprobe dial "+tag+" "+strings.Join(addrs, " "))
	got := map[string]string{}
	ok := wait.Until(60*time.Second, func() bool {
		for _, l := range n.logs(id) {
			for _, a := range addrs {
				if _, rest, found := strings.Cut(l, "DIAL "+tag+" "+a+" "); found {
					got[a] = strings.TrimSpace(rest)
				}
			}
		}
		return len(got) == len(addrs)
	})
	if !ok {
		t.Fatalf("the probe did not report every address (%v):\n%s\n\ndaemon log:\n%s", got, strings.Join(n.logs(id), "\n"), n.log)
	}
	return got
}

// containerAddrs are a container's addresses on the network.
func containerAddrs(t *testing.T, id, network string) (v4, v6 netip.Addr) {
	t.Helper()
	ep := inspectContainer(t, id).NetworkSettings.Networks[network]
	if ep == nil {
		t.Fatalf("container %s is not on %s", id, network)
	}
	return ep.IPAddress, ep.GlobalIPv6Address
}

// hostAddress is the node's own public address (the source of its default
// route): where players, and neighbours, reach published ports.
func hostAddress(t *testing.T) netip.Addr {
	t.Helper()
	c, err := net.Dial("udp", "1.1.1.1:53") // no packet is sent
	if err != nil {
		t.Skip("no default route: cannot pick the node's address")
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
}

// listenOnHost accepts on addr and counts the connections (the host end of
// the gateway check).
func listenOnHost(t *testing.T, addr string) (bound string, got func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	bound = ln.Addr().String()
	var mu sync.Mutex
	n := 0
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			fmt.Fprintf(c, "host gateway\n")
			c.Close()
		}
	})
	return bound, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// TestNeighboursAreIsolated: server A's process reads server B's port that
// B never published, over IPv4 and IPv6, while the operator allows it
// (enable_icc: true, the control: the attack runs); then, on the same
// network (created by the engine with ICC on, which it cannot change), the
// node is restarted with Wharf's default and the same connections fail:
// Wharf's own rules isolate the neighbours whatever the network's option.
// A still reaches B's published port through the node's address, and the
// host on the bridge's gateway.
func TestNeighboursAreIsolated(t *testing.T) {
	parallelDocker(t)
	nw := newTestNetwork(t)
	hostIP := hostAddress(t)
	published := freePort(t)
	a, b := portShellServer(t, 0), portShellServer(t, published)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{a, b}, mutate: func(c *config.Config) {
		nw.apply(c)
		c.Docker.Network.EnableICC, c.Docker.Network.ICCDefaultApplied = true, true // the operator's opt-in
	}})
	for _, s := range []devpanel.Server{a, b} {
		n.uploadProbe(t, s.UUID)
		n.power(s.UUID, "start")
	}
	n.waitShells(t, a, b)
	const secret = 7777 // B's admin port, never published
	n.command(b.UUID, fmt.Sprintf("./portprobe listen B [::]:%d [::]:%d &", secret, published))
	n.waitLog(b.UUID, fmt.Sprintf("LISTEN [::]:%d", published))
	bv4, bv6 := containerAddrs(t, b.UUID, nw.Name)
	if !bv4.IsValid() || !bv6.IsValid() {
		t.Fatalf("B has no IPv4 or IPv6 address on %s: %v %v", nw.Name, bv4, bv6)
	}
	gate, gateCount := listenOnHost(t, net.JoinHostPort(nw.Gate4.String(), "0"))
	v4 := net.JoinHostPort(bv4.String(), fmt.Sprint(secret))
	v6 := net.JoinHostPort(bv6.String(), fmt.Sprint(secret))
	pub := net.JoinHostPort(hostIP.String(), fmt.Sprint(published))

	// Control: with the operator's enable_icc, A reads B's unpublished port.
	got := n.dialFrom(t, a.UUID, "icc", v4, v6, pub, gate)
	t.Logf("enable_icc: true: %v", got)
	checked := []string{v4, v6, pub}
	if testimages.Podman() {
		// Podman (netavark) forwards a published port with DNAT only: a
		// container on the same bridge does not get through the node's
		// address (Docker's userland proxy does it). Not a protection;
		// docs/compatibility.md, "Container engines".
		checked = checked[:2]
	}
	for _, addr := range checked {
		if !strings.HasPrefix(got[addr], "OK portprobe B") {
			t.Fatalf("control (enable_icc: true): A could not read B at %s: %s", addr, got[addr])
		}
	}

	// Wharf's default: the same network (the engine still has ICC on).
	n.stop()
	n.Config.Docker.Network.EnableICC = false
	if err := n.Config.Save(n.CfgPath); err != nil {
		t.Fatal(err)
	}
	n.restart()
	if tables := nw.nftTables(t); !strings.Contains(tables, fmt.Sprintf(`iifname "%s" oifname "%s"`, nw.Bridge, nw.Bridge)) {
		t.Fatalf("no neighbour rule after the restart:\n%s", tables)
	}
	got = n.dialFrom(t, a.UUID, "isolated", v4, v6, pub, gate)
	t.Logf("enable_icc: false: %v", got)
	for _, addr := range []string{v4, v6} {
		if !strings.HasPrefix(got[addr], "ERR") {
			t.Errorf("A read B's unpublished port at %s with enable_icc false: %s", addr, got[addr])
		}
	}
	if !strings.HasPrefix(got[pub], "OK portprobe B") && !testimages.Podman() {
		t.Errorf("A cannot reach B's published port through the node's address %s: %s", pub, got[pub])
	}
	// The host stays reachable on the gateway (the input path).
	if !strings.HasPrefix(got[gate], "OK host gateway") || gateCount() != 2 {
		t.Errorf("A cannot reach the host on the gateway %s: %s (%d connections)", gate, got[gate], gateCount())
	}
}

// metadataHost is a network namespace on the host that plays the cloud's
// metadata service (169.254.169.254:80), an address in a CIDR the operator
// lists, and an internet-like address, reached only from the test's own
// bridge (and from the host with one source address, for the control)
// through policy routing: the host's main table is never touched.
type metadataHost struct {
	ns                          string
	hostAddr                    netip.Addr // the host end of the veth
	Metadata, Operator, Outside string     // ADDR:80
	OperatorCIDR                string

	mu       sync.Mutex
	accepted map[string]int // by local address
}

// ipRun runs ip with args; a failure ends the test.
func ipRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// operatorCIDRFor is the operator's blocked CIDR of a test tag: in the
// benchmarking range 198.18.0.0/15, the lower half of one /24.
func operatorCIDRFor(tag string) (cidr string, third int) {
	b, _ := hex.DecodeString(tag)
	return fmt.Sprintf("198.18.%d.0/25", b[2]), int(b[2])
}

func newMetadataHost(t *testing.T, bridge, tag string, third int) *metadataHost {
	t.Helper()
	b, _ := hex.DecodeString(tag)
	table := fmt.Sprint(20000 + int(b[0])<<6 + int(b[1])%64)
	m := &metadataHost{
		ns:           "wmd-" + tag,
		hostAddr:     netip.AddrFrom4([4]byte{100, 127, b[3], 1}),
		Metadata:     "169.254.169.254:80",
		Operator:     fmt.Sprintf("198.18.%d.10:80", third),
		Outside:      fmt.Sprintf("198.18.%d.200:80", third),
		OperatorCIDR: fmt.Sprintf("198.18.%d.0/24", third),
		accepted:     map[string]int{},
	}
	hostIf, nsIf := "wmh"+tag, "wmn"+tag
	nsAddr := netip.AddrFrom4([4]byte{100, 127, b[3], 2})
	rules := [][]string{
		{"iif", bridge, "to", "169.254.169.254/32", "lookup", table},
		{"iif", bridge, "to", m.OperatorCIDR, "lookup", table},
		{"from", m.hostAddr.String(), "to", "169.254.169.254/32", "lookup", table},
		{"from", m.hostAddr.String(), "to", m.OperatorCIDR, "lookup", table},
	}
	t.Cleanup(func() {
		for _, r := range rules {
			_ = exec.Command("ip", append([]string{"rule", "del"}, r...)...).Run()
		}
		_ = exec.Command("ip", "route", "flush", "table", table).Run()
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		_ = exec.Command("ip", "netns", "del", m.ns).Run()
	})
	ipRun(t, "netns", "add", m.ns)
	ipRun(t, "link", "add", hostIf, "type", "veth", "peer", "name", nsIf, "netns", m.ns)
	ipRun(t, "addr", "add", m.hostAddr.String()+"/30", "dev", hostIf)
	ipRun(t, "link", "set", hostIf, "up")
	for _, a := range []string{nsAddr.String() + "/30", "169.254.169.254/32", strings.TrimSuffix(m.Operator, ":80") + "/32", strings.TrimSuffix(m.Outside, ":80") + "/32"} {
		ipRun(t, "-n", m.ns, "addr", "add", a, "dev", nsIf)
	}
	ipRun(t, "-n", m.ns, "link", "set", "lo", "up")
	ipRun(t, "-n", m.ns, "link", "set", nsIf, "up")
	ipRun(t, "-n", m.ns, "route", "add", "default", "via", m.hostAddr.String())
	for _, dst := range []string{"169.254.169.254/32", m.OperatorCIDR} {
		ipRun(t, "route", "add", dst, "via", nsAddr.String(), "dev", hostIf, "table", table)
	}
	for _, r := range rules {
		ipRun(t, append([]string{"rule", "add"}, r...)...)
	}
	m.serve(t)
	return m
}

// serve runs portprobe listen in the namespace and counts what it accepts.
func (m *metadataHost) serve(t *testing.T) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", m.ns, portprobe(t), "listen", "metadata", m.Metadata, m.Operator, m.Outside)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan struct{}, 3)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); wg.Wait() })
	wg.Go(func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) >= 2 && f[0] == "LISTEN":
				listening <- struct{}{}
			case len(f) >= 4 && f[0] == "ACCEPT":
				m.mu.Lock()
				m.accepted[f[2]]++
				m.mu.Unlock()
			}
		}
	})
	for range 3 {
		select {
		case <-listening:
		case <-time.After(30 * time.Second):
			t.Fatal("the metadata namespace does not listen")
		}
	}
}

func (m *metadataHost) count(addr string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.accepted[addr]
}

// dialFromHost connects from the host end of the veth (the control).
func (m *metadataHost) dialFromHost(t *testing.T, addr string) string {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: m.hostAddr.AsSlice()}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return "ERR " + err.Error()
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return "OK " + strings.TrimSpace(line)
}

// TestPrivateDestinationsAreBlocked: a server's process asks the cloud's
// metadata service for the node's credentials, and an address on a
// network the operator listed in docker.network.blocked_destinations; the
// namespace playing them receives nothing from it, while it answers the
// host (the control) and the process still reaches an address outside the
// blocked ranges through the same route. The rules survive: deleted (as a
// flush or a reboot would) and the daemon restarted, they are back; deleted
// while the daemon runs, the next start puts them back; and when they
// cannot be installed (the daemon without CAP_NET_ADMIN), the server does
// not start and its console, the log and the diagnostics say why.
func TestPrivateDestinationsAreBlocked(t *testing.T) {
	parallelDocker(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	nw := newTestNetwork(t)
	tag := strings.TrimPrefix(nw.Name, "wharf-nr-")
	cidr, third := operatorCIDRFor(tag)
	nw.BlockedByTests = []string{cidr}
	a := portShellServer(t, 0)
	// The installer runs the owner's code too (an egg's npm install).
	a.InstallScript = &devpanel.InstallScript{ContainerImage: "~" + testimages.BusyboxTag, Entrypoint: "sh",
		Script: fmt.Sprintf("/mnt/server/portprobe dial installer 169.254.169.254:80 198.18.%d.10:80 198.18.%d.200:80\n", third, third)}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{a}, mutate: nw.apply})
	n.uploadProbe(t, a.UUID)
	n.power(a.UUID, "start")
	n.waitShells(t, a)
	md := newMetadataHost(t, nw.Bridge, tag, third)

	// Control: the namespace answers on the blocked addresses.
	for _, addr := range []string{md.Metadata, md.Operator} {
		if got := md.dialFromHost(t, addr); !strings.HasPrefix(got, "OK portprobe metadata") {
			t.Fatalf("control: the host does not reach the namespace at %s: %s", addr, got)
		}
	}
	attack := func(round string) {
		t.Helper()
		got := n.dialFrom(t, a.UUID, round, md.Metadata, md.Operator, md.Outside)
		t.Logf("%s: %v", round, got)
		for _, addr := range []string{md.Metadata, md.Operator} {
			if !strings.HasPrefix(got[addr], "ERR") {
				t.Errorf("%s: the server's process reached %s: %s", round, addr, got[addr])
			}
			if c := md.count(strings.TrimSuffix(addr, ":80") + ":80"); c != 1 {
				t.Errorf("%s: the namespace accepted %d connections on %s, want only the host's", round, c, addr)
			}
		}
		if !strings.HasPrefix(got[md.Outside], "OK portprobe metadata") {
			t.Errorf("%s: the server's process cannot reach %s, outside the blocked ranges: %s", round, md.Outside, got[md.Outside])
		}
	}
	attack("boot")

	// A flushed ruleset and a restarted daemon (a host reboot): back. A
	// table of a bridge that no longer exists is deleted at the boot.
	n.stop()
	nw.deleteTables(t)
	gone := "wharf_wng" + tag
	if out, err := exec.Command("nft", "add", "table", "inet", gone).CombinedOutput(); err != nil {
		t.Fatalf("nft add table: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", "inet", gone).Run() })
	n.restart()
	if tables := nw.nftTables(t); !strings.Contains(tables, "169.254.0.0/16") || !strings.Contains(tables, cidr) {
		t.Fatalf("the rules are not back after the restart:\n%s", tables)
	}
	if out, _ := exec.Command("nft", "list", "tables").CombinedOutput(); strings.Contains(string(out), gone) {
		t.Errorf("the table of a bridge that does not exist was kept:\n%s", out)
	}
	attack("restarted")

	// Deleted while the daemon runs: the next start reinstalls them.
	nw.deleteTables(t)
	n.power(a.UUID, "stop")
	n.waitState(a.UUID, "offline", 60*time.Second)
	n.power(a.UUID, "start")
	n.waitShells(t, a)
	if tables := nw.nftTables(t); !strings.Contains(tables, "169.254.0.0/16") {
		t.Fatalf("the start did not reinstall the rules:\n%s", tables)
	}
	attack("reinstalled")

	// The installer (a reinstall runs the egg's script, here the owner's
	// program) is held by the same rules.
	if res, body := n.request("POST", "/api/servers/"+a.UUID+"/reinstall", nil, ""); res.StatusCode != 202 {
		t.Fatalf("reinstall: %d %s", res.StatusCode, body)
	}
	installLog := filepath.Join(n.Config.System.LogDirectory, "install", a.UUID+".log")
	var inst string
	if !wait.Until(90*time.Second, func() bool {
		data, _ := os.ReadFile(installLog)
		inst = string(data)
		return strings.Count(inst, "DIAL installer") == 3
	}) {
		t.Fatalf("the installer's probe did not report:\n%s\n\ndaemon log:\n%s", inst, n.log)
	}
	t.Logf("installer:\n%s", inst)
	for _, addr := range []string{md.Metadata, md.Operator} {
		if !strings.Contains(inst, "DIAL installer "+addr+" ERR") || md.count(addr) != 1 {
			t.Errorf("the installer reached %s (%d connections):\n%s", addr, md.count(addr), inst)
		}
	}
	if !strings.Contains(inst, "DIAL installer "+md.Outside+" OK") {
		t.Errorf("the installer cannot reach %s, outside the blocked ranges:\n%s", md.Outside, inst)
	}

	// Cannot be installed: the server does not start, and says why.
	n.waitState(a.UUID, "offline", 60*time.Second)
	n.stop()
	nw.deleteTablesMaybe(t, true) // none may be left for the restart without CAP_NET_ADMIN
	n.wrap = []string{"setpriv", "--bounding-set", "-net_admin", "--"}
	n.restart()
	n.power(a.UUID, "start")
	lines := n.waitLog(a.UUID, "network firewall is not in place")
	if !strings.Contains(strings.Join(lines, "\n"), "operation not permitted") {
		t.Errorf("the console does not say why the firewall is missing:\n%s", strings.Join(lines, "\n"))
	}
	if st := n.details(a.UUID)["state"]; st != "offline" {
		t.Errorf("state %v after a refused start, want offline", st)
	}
	if info, err := engineInspect(context.Background(), testimages.Client(t), a.UUID); err == nil && info.State != nil && info.State.Running {
		t.Error("the container runs without the firewall")
	}
	if log := n.log.String(); !strings.Contains(log, "Wharf's firewall could not be installed") || !strings.Contains(log, "container not started") {
		t.Errorf("the log does not say the firewall is missing:\n%s", log)
	}
	res, body := n.request("GET", "/api/diagnostics", nil, "")
	if res.StatusCode != 200 || !strings.Contains(string(body), "NOT IN PLACE") {
		t.Errorf("diagnostics: %d, no NOT IN PLACE:\n%s", res.StatusCode, body)
	}
}
