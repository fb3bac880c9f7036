package e2e

import (
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
// netprobe (internal/testutil/netprobe), a static binary uploaded through
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
	for _, fam := range []string{"inet", "bridge"} {
		if out, err := exec.Command("nft", "delete", "table", fam, "wharf_"+nw.Bridge).CombinedOutput(); err != nil {
			t.Fatalf("nft delete table %s: %v: %s", fam, err, out)
		}
	}
}

var (
	netprobeOnce sync.Once
	netprobePath string
	netprobeErr  error
)

// netprobe builds the probe once, statically.
func netprobe(t *testing.T) string {
	t.Helper()
	netprobeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "wharf-netprobe-")
		if err != nil {
			netprobeErr = err
			return
		}
		netprobePath = filepath.Join(dir, "netprobe")
		cmd := exec.Command("go", "build", "-o", netprobePath, "github.com/wharf/wharf/internal/testutil/netprobe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			netprobeErr = fmt.Errorf("build netprobe: %v\n%s", err, out)
		}
	})
	if netprobeErr != nil {
		t.Fatal(netprobeErr)
	}
	return netprobePath
}

// shellServer is a server whose game is a busybox shell reading the
// console: what a customer who replaced the game by their own program has.
func shellServer(t *testing.T, published int) devpanel.Server {
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
		ok := wait.Until(60*time.Second, func() bool {
			if n.details(s.UUID)["state"] == "running" {
				return true
			}
			n.request("POST", "/api/servers/"+s.UUID+"/commands", map[string]any{"commands": []string{"echo shell-ready"}}, "")
			return false
		})
		if !ok {
			t.Fatalf("the shell of %s never answered:\n%s\n\ndaemon log:\n%s", s.UUID, strings.Join(n.logs(s.UUID), "\n"), n.log)
		}
	}
}

// uploadProbe writes netprobe into the server's directory through the file
// manager and makes it executable, as the server's owner would.
func (n *node) uploadProbe(t *testing.T, id string) {
	t.Helper()
	data, err := os.ReadFile(netprobe(t))
	if err != nil {
		t.Fatal(err)
	}
	if res, body := n.request("POST", "/api/servers/"+id+"/files/write?file=%2Fnetprobe", data, ""); res.StatusCode != 204 && res.StatusCode != 200 {
		t.Fatalf("upload netprobe: %d %s", res.StatusCode, body)
	}
	chmod := map[string]any{"root": "/", "files": []map[string]string{{"file": "netprobe", "mode": "755"}}}
	if res, body := n.request("POST", "/api/servers/"+id+"/files/chmod", chmod, ""); res.StatusCode != 204 && res.StatusCode != 200 {
		t.Fatalf("chmod netprobe: %d %s", res.StatusCode, body)
	}
}

// dialFrom runs netprobe dial in the server's console and returns, per
// address, its result line ("OK ..." or "ERR ...").
func (n *node) dialFrom(t *testing.T, id, tag string, addrs ...string) map[string]string {
	t.Helper()
	n.command(id, "./netprobe dial "+tag+" "+strings.Join(addrs, " "))
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
	a, b := shellServer(t, 0), shellServer(t, published)
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
	n.command(b.UUID, fmt.Sprintf("./netprobe listen B [::]:%d [::]:%d &", secret, published))
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
	for _, addr := range []string{v4, v6, pub} {
		if !strings.HasPrefix(got[addr], "OK netprobe B") {
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
	if !strings.HasPrefix(got[pub], "OK netprobe B") {
		t.Errorf("A cannot reach B's published port through the node's address %s: %s", pub, got[pub])
	}
	// The host stays reachable on the gateway (the input path).
	if !strings.HasPrefix(got[gate], "OK host gateway") || gateCount() != 2 {
		t.Errorf("A cannot reach the host on the gateway %s: %s (%d connections)", gate, got[gate], gateCount())
	}
}
