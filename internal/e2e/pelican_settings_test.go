package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
)

// The server settings Pelican sends (issue 22, item 3), each checked on the
// container the real daemon creates.

// startRunning starts every server and waits until each runs.
func (n *node) startRunning(servers ...devpanel.Server) {
	n.t.Helper()
	for _, s := range servers {
		n.power(s.UUID, "start")
	}
	for _, s := range servers {
		n.waitState(s.UUID, "running", 60*time.Second)
	}
}

func inspectContainer(t *testing.T, id string) container.InspectResponse {
	t.Helper()
	info, err := engineInspect(context.Background(), testimages.Client(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// execIn runs cmd in the running container; it returns the combined output
// and the exit code.
func execIn(t *testing.T, id string, cmd ...string) (string, int) {
	t.Helper()
	cli := testimages.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := cli.ExecCreate(ctx, id, client.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	hr, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, hr.Reader); err != nil {
		t.Fatal(err)
	}
	st, err := cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), st.ExitCode
}

// build.oom_killer is Pelican's (environment/settings.go in Pelican Wings:
// OomKillDisable = !OOMKiller), build.oom_disabled Pterodactyl's; Pelican's
// wins when a configuration carries both.
func TestPelicanOOMKiller(t *testing.T) {
	cases := []struct {
		name        string
		build       map[string]any
		wantDisable bool
	}{
		{"pelican killer off", map[string]any{"oom_killer": false}, true},
		{"pelican killer on", map[string]any{"oom_killer": true}, false},
		{"pterodactyl disabled", map[string]any{"oom_disabled": true}, true},
		{"both: pelican wins", map[string]any{"oom_killer": true, "oom_disabled": true}, false},
		{"both: pelican wins (off)", map[string]any{"oom_killer": false, "oom_disabled": false}, true},
		{"neither", map[string]any{}, false},
	}
	var servers []devpanel.Server
	for _, c := range cases {
		s := newGameServer(t)
		build := map[string]any{"memory_limit": 128, "swap": 0, "cpu_limit": 100, "disk_space": 0}
		for k, v := range c.build {
			build[k] = v
		}
		s.Settings["build"] = build
		servers = append(servers, s)
	}
	n := startNode(t, nodeOptions{servers: servers})
	n.startRunning(servers...)
	for i, c := range cases {
		hc := inspectContainer(t, servers[i].UUID).HostConfig
		if hc.OomKillDisable == nil {
			t.Errorf("%s: HostConfig.OomKillDisable not set", c.name)
		} else if *hc.OomKillDisable != c.wantDisable {
			t.Errorf("%s: HostConfig.OomKillDisable = %v, want %v", c.name, *hc.OomKillDisable, c.wantDisable)
		}
	}
}

// SERVER_TIMEZONE becomes the container's TZ when it names a known zone,
// else the node's system.timezone (Pelican Wings server/server.go,
// DetermineServerTimezone and GetEnvironmentVariables).
func TestPelicanServerTimezone(t *testing.T) {
	parallelDocker(t)
	tokyo, bogus, none := newGameServer(t), newGameServer(t), newGameServer(t)
	tokyo.Settings["environment"] = map[string]any{"SERVER_TIMEZONE": "Asia/Tokyo"}
	bogus.Settings["environment"] = map[string]any{"SERVER_TIMEZONE": "../../../etc/passwd"}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{tokyo, bogus, none}, mutate: func(c *config.Config) {
		c.System.Timezone = "Europe/Paris"
	}})
	n.startRunning(tokyo, bogus, none)
	for s, want := range map[string]string{tokyo.UUID: "Asia/Tokyo", bogus.UUID: "Europe/Paris", none.UUID: "Europe/Paris"} {
		var tz []string
		for _, e := range inspectContainer(t, s).Config.Env {
			if strings.HasPrefix(e, "TZ=") {
				tz = append(tz, e)
			}
		}
		if len(tz) != 1 || tz[0] != "TZ="+want {
			t.Errorf("%s: %v, want TZ=%s", s, tz, want)
		}
	}
	// The user's variable pointing outside the zone database changed
	// nothing else.
	n.assertAnswersEveryFace(t, bogus.UUID)
	// Inside the container, as the game sees it.
	if out, code := execIn(t, tokyo.UUID, "sh", "-c", `echo "tz=$TZ"`); code != 0 || strings.TrimSpace(out) != "tz=Asia/Tokyo" {
		t.Errorf("inside: %q (exit %d)", out, code)
	}
}

// allocations.force_outgoing_ip: the container leaves through a per-IP
// bridge named and configured as Pelican Wings does it
// (environment/docker/container.go there: "ip-" + the address with dashes,
// com.docker.network.host_ipv4 = the default allocation's address) instead
// of the node's network. A loopback address keeps traffic on the machine.
func TestPelicanForceOutgoingIP(t *testing.T) {
	ip := fmt.Sprintf("127.0.0.%d", 2+rand.IntN(250))
	nwName := "ip-" + strings.ReplaceAll(ip, ".", "-")
	cli := testimages.Client(t)
	// Registered first, so it runs after the containers' removal.
	t.Cleanup(func() { _, _ = cli.NetworkRemove(context.Background(), nwName, client.NetworkRemoveOptions{}) })
	_, _ = cli.NetworkRemove(context.Background(), nwName, client.NetworkRemoveOptions{}) // a leftover of an earlier run

	forced, plain := newGameServer(t), newGameServer(t)
	port := freePort(t)
	forced.Settings["allocations"] = map[string]any{
		"force_outgoing_ip": true,
		"default":           map[string]any{"ip": ip, "port": port},
		"mappings":          map[string]any{ip: []int{port}},
	}
	plain.Settings["allocations"] = map[string]any{
		"force_outgoing_ip": false,
		"default":           map[string]any{"ip": ip, "port": port + 1},
		"mappings":          map[string]any{ip: []int{port + 1}},
	}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{forced, plain}})
	n.startRunning(forced, plain)

	nwRes, err := cli.NetworkInspect(context.Background(), nwName, client.NetworkInspectOptions{})
	if err != nil {
		t.Fatalf("the per-IP network %s: %v", nwName, err)
	}
	nw := nwRes.Network
	if nw.Options["com.docker.network.host_ipv4"] != ip || nw.Driver != "bridge" {
		t.Errorf("network %s: driver %q options %v", nwName, nw.Driver, nw.Options)
	}
	info := inspectContainer(t, forced.UUID)
	if string(info.HostConfig.NetworkMode) != nwName || info.NetworkSettings.Networks[nwName] == nil || len(info.NetworkSettings.Networks) != 1 {
		t.Errorf("forced: network mode %q, networks %v", info.HostConfig.NetworkMode, keys(info.NetworkSettings.Networks))
	}
	// The control: without the setting, the node's network.
	info = inspectContainer(t, plain.UUID)
	if string(info.HostConfig.NetworkMode) != n.Config.Docker.Network.Mode || info.NetworkSettings.Networks[nwName] != nil {
		t.Errorf("plain: network mode %q, networks %v", info.HostConfig.NetworkMode, keys(info.NetworkSettings.Networks))
	}
	// A second start finds the network and reuses it.
	n.power(forced.UUID, "kill")
	n.waitState(forced.UUID, "offline", 60*time.Second)
	n.startRunning(forced)
	if mode := inspectContainer(t, forced.UUID).HostConfig.NetworkMode; string(mode) != nwName {
		t.Errorf("after a restart: network mode %q", mode)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The per-server /etc/machine-id and the /etc/passwd and /etc/group pair,
// read-only, behind Pelican Wings' keys system.machine_id and
// system.user.passwd (config/config.go, server/mounts.go and
// server/server.go CreateMachineID there: the uuid without dashes); the
// machine-id file goes with the server (router/router_server.go there).
func TestPelicanMachineIDAndPasswd(t *testing.T) {
	parallelDocker(t)
	s := newGameServer(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	n.startRunning(s)

	wantID := strings.ReplaceAll(s.UUID, "-", "")
	if out, code := execIn(t, s.UUID, "cat", "/etc/machine-id"); code != 0 || out != wantID {
		t.Errorf("/etc/machine-id = %q (exit %d), want %q", out, code, wantID)
	}
	uid, gid := n.Config.System.User.UID, n.Config.System.User.GID
	saved, err := config.Load(n.CfgPath) // uid and gid are settled at boot
	if err == nil {
		uid, gid = saved.System.User.UID, saved.System.User.GID
	}
	passwd, code := execIn(t, s.UUID, "cat", "/etc/passwd")
	if code != 0 || !strings.HasPrefix(passwd, fmt.Sprintf("container:x:%d:%d::/home/container:", uid, gid)) {
		t.Errorf("/etc/passwd = %q (exit %d)", passwd, code)
	}
	if group, code := execIn(t, s.UUID, "cat", "/etc/group"); code != 0 || !strings.HasPrefix(group, fmt.Sprintf("container:x:%d:", gid)) {
		t.Errorf("/etc/group = %q (exit %d)", group, code)
	}
	// The container's user now has a name.
	if out, code := execIn(t, s.UUID, "id", "-un"); code != 0 || strings.TrimSpace(out) != "container" {
		t.Errorf("id -un = %q (exit %d)", out, code)
	}
	// Read-only: the game cannot change its machine id or the user table.
	for _, f := range []string{"/etc/machine-id", "/etc/passwd", "/etc/group"} {
		if out, code := execIn(t, s.UUID, "sh", "-c", "echo root::0:0::/:/bin/sh > "+f); code == 0 {
			t.Errorf("%s is writable from the container (%q)", f, out)
		}
	}
	n.assertAnswersEveryFace(t, s.UUID)
	hostFile := filepath.Join(n.Config.System.RootDirectory, "machine-id", s.UUID)
	if b, err := os.ReadFile(hostFile); err != nil || string(b) != wantID {
		t.Errorf("host file %s: %q %v", hostFile, b, err)
	}

	// Deleting the server deletes its machine-id file.
	if res, body := n.request("DELETE", "/api/servers/"+s.UUID, nil, ""); res.StatusCode != 204 {
		t.Fatalf("delete: %d %s", res.StatusCode, body)
	}
	if _, err := os.Stat(hostFile); !os.IsNotExist(err) {
		t.Errorf("machine-id file after deletion: %v", err)
	}

	// Both off: the container has its data mount only.
	off := newGameServer(t)
	n2 := startNode(t, nodeOptions{servers: []devpanel.Server{off}, mutate: func(c *config.Config) {
		c.System.MachineID.Enable = false
		c.System.User.Passwd.Enable = false
	}})
	n2.startRunning(off)
	if m := inspectContainer(t, off.UUID).Mounts; len(m) != 1 || m[0].Destination != "/home/container" {
		t.Errorf("disabled: mounts %+v", m)
	}
	if out, code := execIn(t, off.UUID, "cat", "/etc/machine-id"); code == 0 {
		t.Errorf("disabled: /etc/machine-id exists (%q)", out)
	}
}

// egg.features and the "feature match" event, as Pelican Wings sends it
// (server/listeners.go and router/websocket/listeners.go there): a console
// line containing one of a feature's strings, ignoring case, gives one event
// whose argument is the JSON {key, line, pattern} the panel reads
// (resources/views/filament/components/server-console.blade.php and
// app/Filament/Server/Pages/Console.php in pelican-dev/panel).
func TestPelicanFeatureMatch(t *testing.T) {
	parallelDocker(t)
	const eula = "you need to agree to the EULA in order to run the server"
	s, empty := newGameServer(t), newGameServer(t)
	s.Settings["egg"] = map[string]any{"id": "egg-1", "file_denylist": []string{}, "features": map[string]any{
		"eula":         []string{eula},
		"java_version": []string{"unsupported class file major version"},
	}}
	// Pelican's panel sends an egg without features as [] (a PHP array).
	empty.Settings["egg"] = map[string]any{"id": "egg-2", "file_denylist": []string{}, "features": []string{}}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s, empty}})
	n.startRunning(s, empty)

	waitNextSecond() // a token of the daemon's boot second is refused
	w := n.mustDial(t, s.UUID)
	w.auth(n.sign(t, wsClaims(s.UUID, wsUser1, "*")))
	// A plain line first: the first feature match must be the later line's.
	w.send("send command", "echo nothing to see here")
	w.send("send command", "echo [Server thread/ERROR]: Unsupported class file major version 65")
	w.send("send command", "echo [Server thread/WARN]: YOU NEED TO AGREE TO THE EULA IN ORDER TO RUN THE SERVER. Go to eula.txt")
	// Collect the matches until the EULA's (the console's TTY may echo the
	// typed command too: a line that contains the string as well).
	var got []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, ok := w.next(time.Until(deadline))
		if !ok {
			t.Fatalf("no EULA match; matches so far %q", got)
		}
		if m.Event != "feature match" {
			continue
		}
		var arg struct{ Key, Pattern, Line string }
		if len(m.Args) != 1 || json.Unmarshal([]byte(m.Args[0]), &arg) != nil {
			t.Fatalf("feature match args %q", m.Args)
		}
		got = append(got, arg.Key)
		switch {
		case strings.Contains(arg.Line, "nothing to see"):
			t.Fatalf("a plain line matched: %+v", arg)
		case arg.Key == "java_version" && arg.Pattern == "unsupported class file major version" &&
			strings.Contains(arg.Line, "Unsupported class file major version 65"):
		case arg.Key == "eula" && arg.Pattern == eula && strings.Contains(arg.Line, "YOU NEED TO AGREE TO THE EULA"):
		default:
			t.Fatalf("unexpected match %+v", arg)
		}
		if arg.Key == "eula" {
			break
		}
	}
	if got[0] != "java_version" {
		t.Errorf("matches %q: the Java line came first", got)
	}

	// The server whose egg has no features: no event for the same line.
	w2 := n.mustDial(t, empty.UUID)
	w2.auth(n.sign(t, wsClaims(empty.UUID, wsUser1, "*")))
	w2.send("send command", "echo you need to agree to the eula in order to run the server")
	w2.send("send command", "echo marker-after-eula")
	// Events arrive in order, and the game answers commands in order: a
	// match of the first line would come before the marker's line.
	deadline = time.Now().Add(30 * time.Second)
	for {
		m, ok := w2.next(time.Until(deadline))
		if !ok {
			t.Fatal("the marker line never came")
		}
		if m.Event == "feature match" {
			t.Fatalf("feature match on a server without features: %v", m.Args)
		}
		// The game's own line (a TTY echo of the command starts with "echo").
		if m.Event == "console output" && strings.TrimSpace(m.Args[0]) == "marker-after-eula" {
			break
		}
	}
}
