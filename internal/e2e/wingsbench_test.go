package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"go.yaml.in/yaml/v3"

	"github.com/wharf/wharf/internal/testutil/testimages"
)

// The side-by-side harness: WHARF_BENCH_AGENT=wings makes startNode run
// Pterodactyl Wings (the binary WHARF_BENCH_WINGS_BIN, built outside this
// repository) in place of Wharf, against the same fake panel, so that a
// benchmark's clients (HTTP, websockets, SFTP) drive Wings exactly as they
// drive Wharf, and its figures (CPU and RSS from /proc/<pid>, wall time at
// the client) are taken the same way. Only benchmarks switch: a test run
// with the variable set is skipped. See docs/benchmarks.md, "Wings beside
// Wharf (issue 38)".

// wingsBenchBinary returns the Wings binary when WHARF_BENCH_AGENT=wings,
// or "" when the benchmark runs Wharf.
func wingsBenchBinary(t testing.TB) string {
	t.Helper()
	switch agent := os.Getenv("WHARF_BENCH_AGENT"); agent {
	case "", "wharf":
		return ""
	case "wings":
	default:
		t.Fatalf("WHARF_BENCH_AGENT=%q: want wharf or wings", agent)
	}
	if _, ok := t.(*testing.B); !ok {
		t.Skip("WHARF_BENCH_AGENT=wings runs only the benchmarks")
	}
	bin := os.Getenv("WHARF_BENCH_WINGS_BIN")
	if bin == "" {
		t.Fatal("WHARF_BENCH_AGENT=wings needs WHARF_BENCH_WINGS_BIN (the path of a Wings binary)")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("WHARF_BENCH_WINGS_BIN: %v", err)
	}
	return bin
}

// wingsBridge is the bridge interface Wings gives its network: a constant
// in Wings ("pterodactyl0"), so that one Wings node at a time runs here.
const wingsBridge = "pterodactyl0"

// bootWings writes a Wings configuration for the node's settings (n.Config,
// already filled by startNode: panel, token, ports, directories under dir),
// starts Wings on it and waits until its API answers. At cleanup, Wings is
// stopped (SIGTERM: Wings has no handler, so it dies of the signal, as
// under systemd) and the containers of the node's servers and its Docker
// network are removed.
func (n *node) bootWings(dir string, servers []string) {
	t := n.t
	t.Helper()
	testimages.RequireDocker(t)
	cli := testimages.Client(t)
	ctx := context.Background()
	nw := "wharf-bench-wings-" + randomHex(4)
	v4, v6 := wingsSubnet(t, cli)
	c := n.Config
	cfg := map[string]any{
		"debug":    false,
		"app_name": "Pterodactyl",
		"uuid":     c.UUID,
		"token_id": c.TokenID,
		"token":    c.Token,
		"remote":   c.Remote,
		"api": map[string]any{
			"host": c.API.Host, "port": c.API.Port,
			"ssl":          map[string]any{"enabled": false},
			"upload_limit": 1024,
		},
		"system": map[string]any{
			"root_directory":    c.System.RootDirectory,
			"log_directory":     c.System.LogDirectory,
			"data":              c.System.Data,
			"archive_directory": c.System.ArchiveDirectory,
			"backup_directory":  c.System.BackupDirectory,
			"tmp_directory":     c.System.TmpDirectory,
			// root exists, so Wings creates no user; its containers run as 0.
			"username":          "root",
			"timezone":          "UTC",
			"enable_log_rotate": false, // else Wings writes /etc/logrotate.d/wings
			"sftp": map[string]any{
				"bind_address": c.System.SFTP.BindAddress, "bind_port": c.System.SFTP.BindPort,
			},
		},
		"docker": map[string]any{
			"network": map[string]any{
				"interface": strings.TrimSuffix(v4, ".0/24") + ".1",
				"dns":       []string{"1.1.1.1", "1.0.0.1"},
				"name":      nw, "network_mode": nw, "driver": "bridge",
				"ispn": false, "is_internal": false, "enable_icc": true, "network_mtu": 1500,
				"interfaces": map[string]any{
					"v4": map[string]any{"subnet": v4, "gateway": strings.TrimSuffix(v4, ".0/24") + ".1"},
					"v6": map[string]any{"subnet": v6, "gateway": strings.TrimSuffix(v6, "/64") + "1"},
				},
			},
		},
		// The benchmark clients send no Origin header.
		"allowed_origins": []string{"*"},
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.CfgPath = filepath.Join(dir, "wings.yml")
	if err := os.WriteFile(n.CfgPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// Registered first, so run last: after Wings is gone.
	t.Cleanup(func() {
		for _, id := range servers {
			for _, name := range []string{id, id + "_installer"} {
				_, _ = cli.ContainerRemove(ctx, name, containerRemoveForce)
			}
		}
		if _, err := cli.NetworkRemove(ctx, nw, client.NetworkRemoveOptions{}); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Errorf("removing Wings' network %s: %v", nw, err)
		}
	})
	t.Cleanup(n.stopWings)
	if out, err := exec.Command("ip", "link", "show", wingsBridge).CombinedOutput(); err == nil {
		t.Fatalf("%s exists already (another Wings, or a leftover network): %s", wingsBridge, out)
	}
	n.URL = fmt.Sprintf("http://127.0.0.1:%d", c.API.Port)
	if !n.boot() {
		t.Fatalf("wings exited during boot: %v\n%s", n.exitErr, n.log)
	}
}

// stopWings sends SIGTERM and waits for Wings to exit.
func (n *node) stopWings() {
	if n.cmd == nil || n.cmd.Process == nil || n.bootFailed() {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
		var ee *exec.ExitError
		if n.exitErr != nil && !(errors.As(n.exitErr, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGTERM) {
			n.t.Errorf("wings: %v\n%s", n.exitErr, n.log)
		}
	case <-time.After(40 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
		n.t.Errorf("wings did not stop within 40s of SIGTERM")
	}
}

// wingsSubnet picks a /24 in 10.252.0.0/16 (and a /64 beside it) that no
// Docker network uses: Wings' default (172.18.0.0/16 and
// fdba:17c8:6c94::/64) is Wharf's default too.
func wingsSubnet(t testing.TB, cli *client.Client) (v4, v6 string) {
	t.Helper()
	res, err := cli.NetworkList(context.Background(), client.NetworkListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, nw := range res.Items {
		for _, c := range nw.IPAM.Config {
			used[c.Subnet.String()] = true
		}
	}
	for range 256 {
		x := rand.IntN(250) + 1
		v4 = fmt.Sprintf("10.252.%d.0/24", x)
		v6 = fmt.Sprintf("fd77:696e:6773:%x::/64", x)
		if !used[v4] && !used[v6] {
			return v4, v6
		}
	}
	t.Fatal("no free subnet in 10.252.0.0/16")
	return "", ""
}
