package e2e

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
)

// rootlessUserEnv names the user whose rootless Podman the smoke test
// drives (.ci/podman-rootless.sh sets it, with WHARF_TEST_ENGINE=podman and
// DOCKER_HOST at /run/user/<uid>/podman/podman.sock).
const rootlessUserEnv = "WHARF_TEST_ROOTLESS_USER"

// TestRootlessPodmanSmoke (issue 37): with the documented setup
// (docs/operations.md, "Rootless Podman"): system.username is the engine's
// user, system.user.rootless.enabled with container ids 0, docker.host at
// its socket, Wharf installs a server on rootless Podman (the engine
// mounts the install script's directory as its user), starts it, a
// console line goes round over the websocket, a file written through the
// files API is read back (and belongs to the engine's user on the host),
// and the server stops. On a cgroup v1 host (this CI) rootless Podman drops every
// limit, so the test sets docker.rootless_cgroup_v1_accepted: true, as an
// operator of such a host would have to.
//
// Nothing is prepared for Wharf by hand but what the boot report says the
// operator must do: the test's temporary directories, which are not
// Wharf's, get o+x (the report's "chmod o+x"); Wharf's own 0700 root and
// tmp directories are left as it makes them, for it to prepare.
func TestRootlessPodmanSmoke(t *testing.T) {
	name := os.Getenv(rootlessUserEnv)
	if name == "" {
		t.Skipf("set %s (and DOCKER_HOST at that user's Podman socket, WHARF_TEST_ENGINE=podman): .ci/podman-rootless.sh does", rootlessUserEnv)
	}
	if !testimages.Podman() {
		t.Fatalf("%s is set but %s is not podman", rootlessUserEnv, testimages.EngineEnv)
	}
	s := newGameServer(t)
	testimages.Busybox(context.Background(), t)
	// The install script's directory is mounted by the engine as its own
	// user (issue 37: a root-owned 0700 directory failed every install).
	s.InstallScript = &devpanel.InstallScript{
		ContainerImage: "~" + testimages.BusyboxTag, Entrypoint: "sh",
		Script: "echo installed-rootless > /mnt/server/installed.txt\n",
	}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}, mutate: func(c *config.Config) {
		c.System.Username = name
		c.System.User.Rootless = config.Rootless{Enabled: true, ContainerUID: 0, ContainerGID: 0}
		c.Docker.RootlessCgroupV1Accepted = true
		c.Docker.RootlessWithoutFirewallAccepted = true // the firewall does not reach slirp4netns: docs/operations.md
		base := filepath.Dir(c.System.RootDirectory)
		for _, d := range []string{filepath.Dir(base), base} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
	}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the daemon's log:\n%s", n.log.String())
		}
		n.request("DELETE", "/api/servers/"+s.UUID, nil, "")
	})
	if !strings.Contains(n.log.String(), "rootless engine: prepared") {
		t.Errorf("the boot log does not say what Wharf prepared for the rootless engine:\n%s", n.log.String())
	}
	if strings.Contains(n.log.String(), "rootless engine: the operator must act") {
		t.Errorf("the boot log says the operator must still act:\n%s", n.log.String())
	}

	if res, body := n.request("POST", "/api/servers/"+s.UUID+"/install", nil, ""); res.StatusCode != 202 {
		t.Fatalf("install: %d %s", res.StatusCode, body)
	}
	if ok, _ := installStatus(t, n, s.UUID); !ok {
		t.Fatalf("the install failed on rootless Podman\n%s", n.log)
	}
	if res, out := n.request("GET", "/api/servers/"+s.UUID+"/files/contents?file=installed.txt", nil, ""); res.StatusCode != 200 || string(out) != "installed-rootless\n" {
		t.Fatalf("the installer's file: %d %q", res.StatusCode, out)
	}

	console := n.mustDial(t, s.UUID)
	console.auth(n.sign(t, wsClaims(s.UUID, wsUser1, "control.console", "control.start", "control.stop")))
	console.send("set state", "start")
	collectUntil(t, console, 120*time.Second, func(m wsMsg) bool { return m.Event == "status" && m.Args[0] == "running" })
	console.send("send command", "echo hello-from-rootless")
	console.expect("console output", 30*time.Second, func(a string) bool { return a == "hello-from-rootless" })

	const body = "written through the files API on rootless Podman\n"
	res, out := n.request("POST", "/api/servers/"+s.UUID+"/files/write?file=rootless.txt", body, "")
	if res.StatusCode != 204 {
		t.Fatalf("write: %d %s", res.StatusCode, out)
	}
	res, out = n.request("GET", "/api/servers/"+s.UUID+"/files/contents?file=rootless.txt", nil, "")
	if res.StatusCode != 200 || string(out) != body {
		t.Fatalf("contents: %d %q", res.StatusCode, out)
	}
	fi, err := os.Stat(filepath.Join(n.Config.System.Data, s.UUID, "rootless.txt"))
	if err != nil {
		t.Fatal(err)
	}
	acct, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; strconv.Itoa(int(uid)) != acct.Uid {
		t.Errorf("the file belongs to uid %d on the host, want the engine's user %s (uid %s)", uid, name, acct.Uid)
	}

	// The start action may still hold the server's power lock after the
	// game reached running (rootless Podman's start call returns late):
	// the stop is then refused, as by Wings, and asked again.
	deadline := time.Now().Add(60 * time.Second)
	for stopped := false; !stopped; {
		if time.Now().After(deadline) {
			t.Fatal("the server did not stop within 60 s")
		}
		console.send("set state", "stop")
		collectUntil(t, console, time.Until(deadline), func(m wsMsg) bool {
			stopped = m.Event == "status" && m.Args[0] == "offline"
			return stopped || m.Event == "daemon error" && strings.Contains(strings.Join(m.Args, " "), "Another power action")
		})
		if !stopped {
			console.expect("stats", 30*time.Second, nil) // paces the next try (one frame every few seconds)
		}
	}
}
