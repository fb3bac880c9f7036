package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// Stop by console command, by signal and by the engine's stop.
func TestServersStopMethods(t *testing.T) {
	parallelDocker(t)
	byCommand, bySignal, byDocker := newGameServer(t), newGameServer(t), newGameServer(t)
	bySignal.ProcessConfiguration["stop"] = map[string]any{"type": "signal", "value": "SIGINT"}
	byDocker.ProcessConfiguration["stop"] = map[string]any{"type": "stop"}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{byCommand, bySignal, byDocker}})
	for _, s := range []devpanel.Server{byCommand, bySignal, byDocker} {
		n.power(s.UUID, "start")
	}
	want := map[string]string{byCommand.UUID: "Stopping server", bySignal.UUID: "Signal received: SIGINT", byDocker.UUID: "Signal received: SIGTERM"}
	for id, line := range want {
		n.waitState(id, "running", 60*time.Second)
		n.power(id, "stop")
		n.waitState(id, "offline", 60*time.Second)
		n.waitLog(id, line)
		for _, l := range n.logs(id) {
			if strings.Contains(l, "crashed state") {
				t.Fatalf("%s: a stop was taken for a crash", id)
			}
		}
	}
}

// Environment seen inside the container, and limits visible in docker inspect.
func TestServersEnvironmentAndLimits(t *testing.T) {
	parallelDocker(t)
	s := newGameServer(t)
	s.Settings["environment"] = map[string]any{"MAX_PLAYERS": 20, "PORT_FLOAT": 25565.0, "RATIO": 1.5, "motd": "hi there"}
	s.Settings["allocations"] = map[string]any{
		"default":  map[string]any{"ip": "127.0.0.1", "port": 25599},
		"mappings": map[string]any{"127.0.0.1": []int{25599}},
	}
	s.Settings["build"] = map[string]any{"memory_limit": 256, "swap": 0, "cpu_limit": 150, "io_weight": 500, "threads": "0", "disk_space": 0}
	s.Settings["labels"] = map[string]any{"team": "blue", "Service": "spoofed"}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	n.power(s.UUID, "start")
	n.waitState(s.UUID, "running", 60*time.Second)
	n.command(s.UUID, "env")
	lines := strings.Join(n.waitLog(s.UUID, "MAX_PLAYERS="), "\n")
	for _, want := range []string{"MAX_PLAYERS=20", "PORT_FLOAT=25565", "RATIO=1.5", "MOTD=hi there", "SERVER_IP=127.0.0.1",
		"SERVER_PORT=25599", "SERVER_MEMORY=256", "STARTUP=gameserver"} {
		if !strings.Contains(lines, want+"\r") && !strings.Contains(lines, want+"\n") && !strings.HasSuffix(lines, want) {
			t.Errorf("environment lacks %s:\n%s", want, lines)
		}
	}
	if !strings.Contains(lines, "TZ=") {
		t.Errorf("no TZ:\n%s", lines)
	}
	if strings.Contains(lines, ".000000") {
		t.Errorf("a number rendered with %%f:\n%s", lines)
	}

	info, err := engineInspect(context.Background(), testimages.Client(t), s.UUID)
	if err != nil {
		t.Fatal(err)
	}
	hc := info.HostConfig
	// 256 MiB × 1.15 overhead; the io weight is not checked (engines without
	// a weight-capable I/O scheduler drop it with a warning).
	if hc.Memory != 308700774 || hc.MemoryReservation != 256<<20 || hc.MemorySwap != hc.Memory || hc.CPUQuota != 150000 ||
		hc.CPUPeriod != 100000 || hc.CpusetCpus != "0" || hc.PidsLimit == nil || *hc.PidsLimit != 512 {
		t.Errorf("limits: mem %d res %d swap %d quota %d period %d cpuset %q pids %v",
			hc.Memory, hc.MemoryReservation, hc.MemorySwap, hc.CPUQuota, hc.CPUPeriod, hc.CpusetCpus, hc.PidsLimit)
	}
	if !hc.ReadonlyRootfs || hc.Privileged || len(hc.CapDrop) == 0 || !strings.Contains(strings.Join(hc.SecurityOpt, ","), "no-new-privileges") {
		t.Errorf("hardening: ro %v priv %v capdrop %v secopt %v", hc.ReadonlyRootfs, hc.Privileged, hc.CapDrop, hc.SecurityOpt)
	}
	if _, ok := hc.Tmpfs["/tmp"]; !ok {
		t.Errorf("tmpfs %v", hc.Tmpfs)
	}
	// The data directory, writable; the rest are the read-only system files
	// (pelican_settings_test.go).
	dataMounts := 0
	for _, m := range info.Mounts {
		data := m.Destination == "/home/container" && m.Source == filepath.Join(n.Config.System.Data, s.UUID) && m.RW
		system := !m.RW && slices.Contains([]string{"/etc/passwd", "/etc/group", "/etc/machine-id"}, m.Destination)
		if data {
			dataMounts++
		}
		if !data && !system {
			t.Errorf("mounts %+v", info.Mounts)
		}
	}
	if dataMounts != 1 || len(info.Mounts) != 4 {
		t.Errorf("mounts %+v", info.Mounts)
	}
	var bound []string
	for p, bs := range hc.PortBindings {
		for _, b := range bs {
			bound = append(bound, p.String()+"@"+b.HostIP.String()+":"+b.HostPort)
		}
	}
	if len(bound) != 2 || !strings.Contains(strings.Join(bound, " "), "25599/tcp@127.0.0.1:25599") || !strings.Contains(strings.Join(bound, " "), "25599/udp@127.0.0.1:25599") {
		t.Errorf("port bindings %v", bound)
	}
	cfg := info.Config
	if cfg.Hostname != s.UUID || !cfg.Tty || !cfg.OpenStdin || cfg.Labels["Service"] != "Wharf" || cfg.Labels["team"] != "blue" {
		t.Errorf("config: hostname %q tty %v stdin %v labels %v", cfg.Hostname, cfg.Tty, cfg.OpenStdin, cfg.Labels)
	}
	n.power(s.UUID, "kill")
	n.waitState(s.UUID, "offline", 60*time.Second)
}

// The console under a flood (one throttle notice), a 10 MB line without
// stopping the console, and the logs size rule.
func TestServersConsole(t *testing.T) {
	s := newGameServer(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	n.power(s.UUID, "start")
	n.waitState(s.UUID, "running", 60*time.Second)

	n.command(s.UUID, "longline 10485760", "echo after-the-long-line")
	lines := n.waitLog(s.UUID, "after-the-long-line")
	for _, l := range lines {
		if len(l) > 16<<10 {
			t.Fatalf("a console line of %d bytes was kept", len(l))
		}
	}

	n.command(s.UUID, "flood 50000")
	atNotice := n.waitLog(s.UUID, "outputting console data too quickly")
	// Lines read in the same window as the flood's tail are dropped too:
	// ask until one arrives in a fresh window.
	var asked time.Time
	wait.For(t, 2*time.Minute, func() bool {
		// One echo every 200 ms at most: asking faster would itself keep
		// the console's window full.
		if time.Since(asked) >= 200*time.Millisecond {
			n.command(s.UUID, "echo still-alive")
			asked = time.Now()
		}
		return slices.ContainsFunc(n.logs(s.UUID), func(l string) bool { return l == "still-alive" })
	}, "a line after the flood (the console stayed throttled)")
	// One notice per flood, not one per dropped window: no snapshot of the
	// console holds two. (The notice itself may have scrolled out of the
	// 100-line window by now on a loaded machine, where the loop above
	// needed many echoes: waitLog saw it.)
	for name, lines := range map[string][]string{"when the notice came": atNotice, "after the flood": n.logs(s.UUID)} {
		notices := 0
		for _, l := range lines {
			if strings.Contains(l, "too quickly") {
				notices++
			}
		}
		if notices > 1 {
			t.Errorf("%d throttle notices in the console %s, want one", notices, name)
		}
	}

	for size, want := range map[string]int{"5": 5, "1": 1, "1000": 100, "": 100, "0": 100} {
		_, body := n.request("GET", "/api/servers/"+s.UUID+"/logs?size="+size, nil, "")
		var l struct{ Data []string }
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Data) != want {
			t.Errorf("logs?size=%s gave %d lines, want %d", size, len(l.Data), want)
		}
	}
	if res, _ := n.request("GET", "/api/servers/"+s.UUID+"/logs?size=abc", nil, ""); res.StatusCode != 400 {
		t.Errorf("logs?size=abc: %d", res.StatusCode)
	}
	n.power(s.UUID, "kill")
	n.waitState(s.UUID, "offline", 60*time.Second)
}

// The lock refuses wait_seconds 0 while an action runs; kill wins over that
// action; flags refuse power actions with a JSON error and kill bypasses them.
func TestServersPowerLockFlagsAndKill(t *testing.T) {
	parallelDocker(t)
	s := newGameServer(t)
	// This stop command is ignored by the game server: the stop holds the
	// lock until the stop timeout (10 minutes) or a kill.
	s.ProcessConfiguration["stop"] = map[string]any{"type": "command", "value": "sleep 0"}
	testimages.Busybox(context.Background(), t)
	s.InstallScript = &devpanel.InstallScript{ContainerImage: "~" + testimages.BusyboxTag, Entrypoint: "sh", Script: "sleep 5\n"}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	n.power(s.UUID, "start")
	n.waitState(s.UUID, "running", 60*time.Second)
	n.power(s.UUID, "stop")
	n.waitState(s.UUID, "stopping", 30*time.Second)
	res, body := n.request("POST", "/api/servers/"+s.UUID+"/power", map[string]any{"action": "restart", "wait_seconds": 0}, "")
	if res.StatusCode != 409 || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("restart with a busy lock and wait_seconds 0: %d %s", res.StatusCode, body)
	}
	n.power(s.UUID, "kill")
	n.waitState(s.UUID, "offline", 60*time.Second)

	// Installing: start, stop and restart are refused; kill is not.
	if res, body := n.request("POST", "/api/servers/"+s.UUID+"/reinstall", nil, ""); res.StatusCode != 202 {
		t.Fatalf("reinstall: %d %s", res.StatusCode, body)
	}
	for _, a := range []string{"start", "stop", "restart"} {
		res, body := n.request("POST", "/api/servers/"+s.UUID+"/power", map[string]any{"action": a}, "")
		if res.StatusCode != 409 || !strings.Contains(string(body), "installing") {
			t.Errorf("%s while installing: %d %s", a, res.StatusCode, body)
		}
	}
	if res, _ := n.request("POST", "/api/servers/"+s.UUID+"/power", map[string]any{"action": "kill"}, ""); res.StatusCode != 202 {
		t.Errorf("kill while installing: %d", res.StatusCode)
	}
	if _, ok := n.Panel.WaitForCall("POST", "/servers/"+s.UUID+"/install", 60*time.Second); !ok {
		t.Fatal("install never reported")
	}
}

// A suspension seen by a sync stops the server; start is then refused (400).
func TestServersSuspendThroughSync(t *testing.T) {
	parallelDocker(t)
	s := newGameServer(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	n.power(s.UUID, "start")
	n.waitState(s.UUID, "running", 60*time.Second)
	n.Panel.UpdateSettings(s.UUID, "suspended", true)
	if res, body := n.request("POST", "/api/servers/"+s.UUID+"/sync", nil, ""); res.StatusCode != 204 {
		t.Fatalf("sync: %d %s", res.StatusCode, body)
	}
	n.waitState(s.UUID, "offline", 60*time.Second)
	if d := n.details(s.UUID); d["is_suspended"] != true {
		t.Fatalf("details after suspension: %v", d)
	}
	res, body := n.request("POST", "/api/servers/"+s.UUID+"/power", map[string]any{"action": "start"}, "")
	if res.StatusCode != 400 || !strings.Contains(string(body), "suspended") {
		t.Fatalf("start while suspended: %d %s", res.StatusCode, body)
	}
}

// Delete leaves no container and no files; the server is gone from the API.
func TestServersDelete(t *testing.T) {
	parallelDocker(t)
	s := newGameServer(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	n.power(s.UUID, "start")
	n.waitState(s.UUID, "running", 60*time.Second)
	if res, body := n.request("DELETE", "/api/servers/"+s.UUID, nil, ""); res.StatusCode != 204 {
		t.Fatalf("delete: %d %s", res.StatusCode, body)
	}
	if _, err := engineInspect(context.Background(), testimages.Client(t), s.UUID); !cerrdefs.IsNotFound(err) {
		t.Fatalf("container after delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(n.Config.System.Data, s.UUID)); !os.IsNotExist(err) {
		t.Fatalf("files after delete: %v", err)
	}
	if res, _ := n.request("GET", "/api/servers/"+s.UUID, nil, ""); res.StatusCode != 404 {
		t.Fatalf("details after delete: %d", res.StatusCode)
	}
	_, body := n.request("GET", "/api/servers", nil, "")
	if strings.Contains(string(body), s.UUID) {
		t.Fatalf("listed after delete: %s", body)
	}
}
