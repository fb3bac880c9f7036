package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

func TestAttachStartDoneLineAndCommands(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "attach")
	spec.Env = append(spec.Env, "SERVER_PORT=25565", "STARTUP=java -jar server.jar")
	c := startGameServer(t, r, spec)

	c.send(t, "echo hello wharf")
	c.expectLine(t, "hello wharf")

	c.send(t, "env")
	c.send(t, "echo end of env")
	seen := c.expectLine(t, "end of env")
	for _, want := range []string{"WHARF_TEST=1", "SERVER_PORT=25565", "STARTUP=java -jar server.jar", "HOSTNAME=" + spec.Name} {
		if !slices.Contains(seen, want) {
			t.Errorf("%s not in the environment: %q", want, seen)
		}
	}

	c.send(t, "nonsense arg")
	c.expectLine(t, "Unknown command: nonsense")

	st, err := r.Inspect(context.Background(), spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Running || st.StartedAt.IsZero() || time.Since(st.StartedAt) > time.Minute {
		t.Errorf("Inspect while running = %+v", st)
	}

	c.send(t, "stop")
	c.expectLine(t, "Stopping server")
	c.waitEnd(t, 20*time.Second)
	st, err = r.Wait(context.Background(), spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running || st.ExitCode != 0 {
		t.Errorf("after stop command: %+v, want exited 0", st)
	}
}

func TestStopWithDockerStop(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "stop")
	c := startGameServer(t, r, spec)
	if err := r.Stop(context.Background(), spec.Name, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	c.expectLine(t, "Signal received: SIGTERM")
	st, err := r.Inspect(context.Background(), spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running || st.ExitCode != 0 {
		t.Errorf("after docker stop: %+v, want exited 0", st)
	}
	// Stopping a stopped container is not an error.
	if err := r.Stop(context.Background(), spec.Name, time.Second); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

func TestSignalTerm(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "sigterm")
	c := startGameServer(t, r, spec)
	if err := r.Signal(context.Background(), spec.Name, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	c.expectLine(t, "Signal received: SIGTERM")
	st, err := r.Wait(context.Background(), spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running || st.ExitCode != 0 {
		t.Errorf("after SIGTERM: %+v, want exited 0", st)
	}
}

func TestSignalIntAndKill(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "sigkill")
	c := startGameServer(t, r, spec)
	// The game server exits on SIGINT too; SIGKILL the next one.
	if err := r.Signal(context.Background(), spec.Name, "SIGINT"); err != nil {
		t.Fatal(err)
	}
	c.expectLine(t, "Signal received: SIGINT")
	if _, err := r.Wait(context.Background(), spec.Name); err != nil {
		t.Fatal(err)
	}

	spec2 := gameServerSpec(t, r, "sigkill")
	startGameServer(t, r, spec2)
	if err := r.Signal(context.Background(), spec2.Name, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	st, err := r.Wait(context.Background(), spec2.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running || st.ExitCode != 137 {
		t.Errorf("after SIGKILL: %+v, want exit code 137", st)
	}
	err = r.Signal(context.Background(), spec2.Name, "SIGKILL")
	if !errors.Is(err, runtime.ErrNotRunning) {
		t.Errorf("signal to an exited container = %v, want ErrNotRunning", err)
	}
	err = r.Signal(context.Background(), "wharf-test-missing-"+randHex(4), "SIGTERM")
	if !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("signal to a missing container = %v, want ErrNotFound", err)
	}
}

func TestCrashExitCode(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "crash")
	c := startGameServer(t, r, spec)
	c.send(t, "crash")
	st, err := r.Wait(context.Background(), spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running || st.ExitCode != 1 || st.OOMKilled {
		t.Errorf("after crash: %+v, want exit code 1, not OOM-killed", st)
	}
	if st.StartedAt.IsZero() {
		t.Error("StartedAt not parsed")
	}
}

func TestOOMKilled(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "oom")
	spec.Limits.MemoryBytes = 24 << 20
	spec.Limits.MemorySwapBytes = 24 << 20 // no swap
	c := startGameServer(t, r, spec)
	c.send(t, "alloc 256")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := r.Wait(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name() == EnginePodman && r.eng.cgroupV1 && !st.OOMKilled && st.ExitCode == 137 {
		// Podman 4.3 on cgroup v1 (runc, cgroupfs) does not tell an OOM
		// kill from another SIGKILL: State.OOMKilled stays false, its
		// events have "died" and no "oom", and the container's memory
		// cgroup (memory.oom_control's oom_kill count) is already removed
		// when the wait returns, so Wharf cannot read it afterwards
		// (docs/compatibility.md, "Issue 37: OOM kills on Podman").
		t.Skipf("killed (137); Podman on cgroup v1 does not report OOM kills and removes the cgroup that counted it before the wait returns: %+v", st)
	}
	if !st.OOMKilled || st.ExitCode != 137 {
		t.Errorf("after allocating past the limit: %+v, want OOM-killed with 137", st)
	}
	// What Wait falls back on when the engine published the exit before
	// the oom (it then leaves OOMKilled false; seen 1 in 12 under load):
	// the container's oom event is found in the engine's log.
	if !r.eng.podman() && !r.lateOOM(ctx, spec.Name, st.StartedAt) {
		t.Error("the engine's oom event of the container was not found")
	}
}

// The control of TestOOMKilled: a container killed with SIGKILL exits 137
// too, and is not reported OOM-killed (the wait looks for a late "oom"
// event of the engine, and finds none).
func TestKilledIsNotOOMKilled(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "kill")
	startGameServer(t, r, spec)
	if err := r.Signal(context.Background(), spec.Name, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := r.Wait(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running || st.ExitCode != 137 || st.OOMKilled {
		t.Errorf("after SIGKILL: %+v, want exit code 137, not OOM-killed", st)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Skipf("udp port %d busy", port) // vanishingly rare; not a Docker skip
	}
	u.Close()
	return port
}

func TestCreateMapsSpecOntoContainer(t *testing.T) {
	r := newRuntime(t)
	cli := rawClient(t)
	ctx := context.Background()
	spec := gameServerSpec(t, r, "limits")
	data := t.TempDir()
	if err := os.Chmod(data, 0o777); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	spec.Hostname = "wharf-host"
	spec.Domainname = "example.test"
	spec.User = "1000:1000"
	spec.Mounts = []runtime.Mount{{Source: data, Target: "/home/container"}}
	spec.Ports = []runtime.PortBinding{
		{IP: "127.0.0.1", Port: port, Protocol: "tcp"},
		{IP: "127.0.0.1", Port: port, Protocol: "udp"},
	}
	spec.Limits = runtime.Limits{
		MemoryBytes:            int64(1.15 * 128 * 1000 * 1000),
		MemoryReservationBytes: 128 * 1000 * 1000,
		MemorySwapBytes:        int64(1.15*128*1000*1000) + 64*1000*1000,
		CPUQuota:               50000,
		CPUPeriod:              100000,
		CPUShares:              1024,
		CpusetCpus:             "0",
		IOWeight:               500,
		PidsLimit:              128,
	}
	spec.Tmpfs = map[string]string{"/tmp": "rw,exec,nosuid,size=16M"}
	spec.DNS = []string{"1.1.1.1", "1.0.0.1"}
	spec.LogConfig = runtime.LogConfig{Type: "local", Config: map[string]string{"max-size": "5m", "max-file": "1", "compress": "false", "mode": "non-blocking"}}
	spec.Hardened = true
	spec.Labels[runtime.NodeLabel] = "node-" + randHex(4)

	// Create twice: the second create replaces the first container (of the
	// same node).
	if err := r.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	first, err := inspectContainer(ctx, cli, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	c := startGameServer(t, r, spec)
	info, err := inspectContainer(ctx, cli, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID == first.ID {
		t.Error("Create did not replace the existing container")
	}

	cfg, hc := info.Config, info.HostConfig
	check := func(what string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("Hostname", cfg.Hostname, "wharf-host")
	if r.Name() != EnginePodman {
		check("Domainname", cfg.Domainname, "example.test")
	}
	check("User", cfg.User, "1000:1000")
	check("Tty", cfg.Tty, true)
	check("OpenStdin", cfg.OpenStdin, true)
	check("StdinOnce", cfg.StdinOnce, false)
	if r.Name() != EnginePodman { // Podman's inspect reports false
		check("AttachStdin", cfg.AttachStdin, true)
	}
	check("label Service", cfg.Labels["Service"], "Wharf")
	check("label ContainerType", cfg.Labels["ContainerType"], "server_process")
	check("label NodeUUID", cfg.Labels[runtime.NodeLabel], spec.Labels[runtime.NodeLabel])
	check("Memory", hc.Memory, spec.Limits.MemoryBytes)
	check("MemoryReservation", hc.MemoryReservation, spec.Limits.MemoryReservationBytes)
	check("MemorySwap", hc.MemorySwap, spec.Limits.MemorySwapBytes)
	check("CPUQuota", hc.CPUQuota, int64(50000))
	check("CPUPeriod", hc.CPUPeriod, int64(100000))
	check("CPUShares", hc.CPUShares, int64(1024))
	check("CpusetCpus", hc.CpusetCpus, "0")
	if hc.PidsLimit == nil || *hc.PidsLimit != 128 {
		t.Errorf("PidsLimit = %v, want 128", hc.PidsLimit)
	}
	check("ReadonlyRootfs", hc.ReadonlyRootfs, true)
	check("DNS", fmt.Sprint(hc.DNS), "[1.1.1.1 1.0.0.1]")
	if r.Name() == EnginePodman {
		checkPodmanSpec(t, r, spec.Name, hc)
	} else {
		checkDockerSpec(t, hc, data)
	}
	for _, proto := range []string{"tcp", "udp"} {
		p := network.MustParsePort(strconv.Itoa(port) + "/" + proto)
		b := hc.PortBindings[p]
		if len(b) != 1 || b[0].HostIP.String() != "127.0.0.1" || b[0].HostPort != strconv.Itoa(port) {
			t.Errorf("PortBindings[%s] = %+v", p, b)
		}
		if _, ok := cfg.ExposedPorts[p]; !ok {
			t.Errorf("%s not exposed", p)
		}
	}

	// The hardened container runs: it can write to the bind mount and to
	// the tmpfs, not to its root filesystem.
	c.send(t, "echo ready")
	c.expectLine(t, "ready")
	if info.State == nil || !info.State.Running {
		t.Fatalf("hardened container not running: %+v", info.State)
	}
	out := execOutput(t, spec.Name, "sh", "-c", "touch /home/container/f && touch /tmp/f && echo writable; touch /rootfile 2>/dev/null || echo readonly; id -u")
	for _, want := range []string{"writable", "readonly", "1000"} {
		if !strings.Contains(out, want) {
			t.Errorf("exec output %q lacks %q", out, want)
		}
	}
	if _, err := os.Stat(data + "/f"); err != nil {
		t.Errorf("file written in the container is not in the bind source: %v", err)
	}
}

func TestUpdateLimitsLive(t *testing.T) {
	r := newRuntime(t)
	cli := rawClient(t)
	ctx := context.Background()
	spec := gameServerSpec(t, r, "update")
	spec.Limits = runtime.Limits{MemoryBytes: 64 << 20, MemorySwapBytes: 128 << 20, PidsLimit: 64}
	startGameServer(t, r, spec)
	err := r.Update(ctx, spec.Name, runtime.Limits{MemoryBytes: 96 << 20, MemorySwapBytes: 192 << 20, CPUQuota: 40000, CPUPeriod: 100000, PidsLimit: 100})
	if r.Name() == EnginePodman {
		// Podman 4 has no update route: Update says so, never "not found".
		if !errors.Is(err, runtime.ErrLiveUpdateUnsupported) || errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("Update on Podman = %v, want ErrLiveUpdateUnsupported", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := inspectContainer(ctx, cli, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	hc := info.HostConfig
	if hc.Memory != 96<<20 || hc.MemorySwap != 192<<20 || hc.CPUQuota != 40000 || hc.PidsLimit == nil || *hc.PidsLimit != 100 {
		t.Errorf("after update: memory %d swap %d quota %d pids %v", hc.Memory, hc.MemorySwap, hc.CPUQuota, hc.PidsLimit)
	}
	if !info.State.Running {
		t.Error("update stopped the container")
	}
	if err := r.Update(ctx, "wharf-test-missing-"+randHex(4), runtime.Limits{MemoryBytes: 1 << 30}); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("update of a missing container = %v, want ErrNotFound", err)
	}
}

func TestStatsStream(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "stats")
	startGameServer(t, r, spec)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ch, err := r.Stats(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	var got []runtime.Stats
	for len(got) < 2 {
		select {
		case s, ok := <-ch:
			if !ok {
				t.Fatalf("stats channel closed early after %d samples", len(got))
			}
			got = append(got, s)
		case <-ctx.Done():
			t.Fatal("no stats samples")
		}
	}
	for _, s := range got {
		if s.MemoryBytes == 0 || s.MemoryLimitBytes != 64<<20 || s.CPUAbsolute < 0 {
			t.Errorf("sample %+v: want nonzero memory and the 64 MiB limit", s)
		}
	}
	if err := r.Stop(context.Background(), spec.Name, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("stats channel not closed after the container stopped")
		}
	}
}

func TestStatsEndsWithContext(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "statsctx")
	startGameServer(t, r, spec)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := r.Stats(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	cancel()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("stats channel not closed after ctx ended")
		}
	}
}

func TestLogsTail(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "logs")
	spec.LogConfig = runtime.LogConfig{Type: "local", Config: map[string]string{"max-size": "5m", "max-file": "1", "compress": "false"}}
	c := startGameServer(t, r, spec)
	c.send(t, "flood 50")
	c.expectLine(t, "flood line 50")
	ctx := context.Background()
	lines, err := r.Logs(ctx, spec.Name, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 10 || lines[0] != "flood line 41" || lines[9] != "flood line 50" {
		t.Errorf("Logs(10) = %q", lines)
	}
	all, err := r.Logs(ctx, spec.Name, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 55 || all[0] != "Starting fake game server" {
		t.Errorf("Logs(1000) gave %d lines starting %q", len(all), all[:min(3, len(all))])
	}
	if lines, err := r.Logs(ctx, spec.Name, 0); err != nil || len(lines) != 0 {
		t.Errorf("Logs(0) = %q, %v", lines, err)
	}
	if _, err := r.Logs(ctx, "wharf-test-missing-"+randHex(4), 10); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Logs of a missing container = %v, want ErrNotFound", err)
	}
}

func TestMissingContainer(t *testing.T) {
	r := newRuntime(t)
	ctx := context.Background()
	name := "wharf-test-missing-" + randHex(4)
	if err := r.Remove(ctx, name, ""); err != nil {
		t.Errorf("Remove of a missing container = %v, want nil", err)
	}
	if _, err := r.Inspect(ctx, name); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Inspect = %v, want ErrNotFound", err)
	}
	if _, err := r.Wait(ctx, name); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Wait = %v, want ErrNotFound", err)
	}
	if err := r.Start(ctx, name); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Start = %v, want ErrNotFound", err)
	}
	if _, err := r.Attach(ctx, name); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Attach = %v, want ErrNotFound", err)
	}
	if _, err := r.Stats(ctx, name); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Stats = %v, want ErrNotFound", err)
	}
}

func TestRemoveRunningContainer(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "remove")
	c := startGameServer(t, r, spec)
	if err := r.Remove(context.Background(), spec.Name, ""); err != nil {
		t.Fatal(err)
	}
	c.waitEnd(t, 20*time.Second)
	if _, err := r.Inspect(context.Background(), spec.Name); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Inspect after Remove = %v, want ErrNotFound", err)
	}
}

// Two nodes sharing one engine: a container labelled for another node
// survives a Remove (and the remove-before-create of a Create) on behalf of
// this node; an unlabelled one (an older version's, or another agent's) is
// treated as ours and removed.
func TestRemoveLeavesOtherNodesContainer(t *testing.T) {
	r := newRuntime(t)
	ctx := context.Background()
	const us, them = "node-a", "node-b"

	theirs := gameServerSpec(t, r, "owner")
	theirs.Labels[runtime.NodeLabel] = them
	if err := r.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	before, err := inspectContainer(ctx, rawClient(t), theirs.Name)
	if err != nil {
		t.Fatal(err)
	}
	var other *runtime.OtherNodeError
	if err := r.Remove(ctx, theirs.Name, us); !errors.As(err, &other) || other.Node != them || other.Container != theirs.Name {
		t.Fatalf("Remove of another node's container = %v, want an OtherNodeError naming %s", err, them)
	}
	ours := theirs
	ours.Labels = map[string]string{runtime.NodeLabel: us}
	if err := r.Create(ctx, ours); !errors.As(err, &other) || other.Node != them {
		t.Fatalf("Create over another node's container = %v, want an OtherNodeError naming %s", err, them)
	}
	after, err := inspectContainer(ctx, rawClient(t), theirs.Name)
	if err != nil || after.ID != before.ID || after.Config.Labels[runtime.NodeLabel] != them {
		t.Fatalf("the other node's container did not survive: %v", err)
	}
	// Its own node removes it.
	if err := r.Remove(ctx, theirs.Name, them); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Inspect(ctx, theirs.Name); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("Inspect after the owner's Remove = %v, want ErrNotFound", err)
	}

	unlabelled := gameServerSpec(t, r, "unlabelled")
	if err := r.Create(ctx, unlabelled); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(ctx, unlabelled.Name, us); err != nil {
		t.Fatalf("Remove of an unlabelled container = %v, want nil", err)
	}
	if _, err := r.Inspect(ctx, unlabelled.Name); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("Inspect after removing an unlabelled container = %v, want ErrNotFound", err)
	}
	if err := r.Remove(ctx, unlabelled.Name, us); err != nil {
		t.Fatalf("Remove of a missing container with a node = %v, want nil", err)
	}
}

func TestAttachTenMegabyteLine(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "longline")
	c := startGameServer(t, r, spec)
	c.send(t, "longline 10000000")
	c.send(t, "echo after the long line")
	seen := c.expect(t, 60*time.Second, "the line after the long line", func(l string) bool { return l == "after the long line" })
	long := false
	for _, l := range seen {
		long = long || strings.HasPrefix(l, strings.Repeat("x", 4000))
	}
	if !long {
		t.Error("the long line was not seen before the next line")
	}
	c.send(t, "echo still flowing")
	c.expectLine(t, "still flowing")
}

func TestEnsureNetwork(t *testing.T) {
	r := newRuntime(t)
	cli := rawClient(t)
	ctx := context.Background()

	// Random /24s in 10.200.0.0/13, unlikely to collide with anything.
	b := randHex(2)
	n1, _ := strconv.ParseUint(b[:2], 16, 8)
	n2, _ := strconv.ParseUint(b[2:], 16, 8)
	subnetA := "10." + strconv.Itoa(200+int(n1%8)) + "." + strconv.Itoa(int(n2)) + ".0/24"
	gateA := strings.TrimSuffix(subnetA, "0/24") + "1"

	name := testName("net")
	cleanupNetwork(t, name)
	spec := runtime.NetworkSpec{
		Name:       name,
		Driver:     "bridge",
		BridgeName: "wt" + randHex(4),
		EnableICC:  true,
		MTU:        1500,
		IPv4Subnet: subnetA,
		IPv4Gate:   gateA,
	}
	info, err := r.EnsureNetwork(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	want := runtime.NetworkInfo{Driver: "bridge", IPv4Subnet: subnetA, IPv4Gate: gateA, Created: true, BridgeName: spec.BridgeName}
	if info != want {
		t.Errorf("EnsureNetwork = %+v, want %+v", info, want)
	}
	nw, err := inspectNetwork(ctx, cli, name)
	if err != nil {
		t.Fatal(err)
	}
	options := map[string]string{
		"com.docker.network.bridge.name":                 spec.BridgeName,
		"com.docker.network.bridge.enable_icc":           "true",
		"com.docker.network.bridge.enable_ip_masquerade": "true",
		"com.docker.network.bridge.host_binding_ipv4":    "0.0.0.0",
		"com.docker.network.driver.mtu":                  "1500",
	}
	if r.Name() == EnginePodman {
		// Podman keeps the MTU (as "mtu") and takes the bridge's name
		// (checked through BridgeName above); it ignores the rest, which
		// Wharf's firewall enforces.
		options = map[string]string{"mtu": "1500"}
	}
	for k, v := range options {
		if nw.Options[k] != v {
			t.Errorf("option %s = %q, want %q", k, nw.Options[k], v)
		}
	}
	// Existing: reported as it is, not created again.
	info, err = r.EnsureNetwork(ctx, spec)
	want.Created = false
	if err != nil || info != want {
		t.Errorf("second EnsureNetwork = %+v, %v; want %+v", info, err, want)
	}

	// Overlap: another network with subnet A forces the engine's choice.
	name2 := testName("net")
	cleanupNetwork(t, name2)
	spec2 := spec
	spec2.Name = name2
	spec2.BridgeName = "" // the engine names it br-<id>
	info, err = r.EnsureNetwork(ctx, spec2)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Created || info.Driver != "bridge" || info.IPv4Subnet == "" || info.IPv4Subnet == subnetA || info.IPv4Gate == "" {
		t.Errorf("EnsureNetwork on an overlapping subnet = %+v, want a created bridge with another subnet", info)
	}
	nw2, err := inspectNetwork(ctx, cli, name2)
	if err != nil {
		t.Fatal(err)
	}
	if len(nw2.IPAM.Config) == 0 || nw2.IPAM.Config[0].Subnet.String() != info.IPv4Subnet {
		t.Errorf("reported subnet %s, engine has %+v", info.IPv4Subnet, nw2.IPAM.Config)
	}
	if r.Name() == EnginePodman {
		// Podman names its bridges podman<N> and creates the interface when
		// the first container joins: the name is Podman's own inspect's.
		want, err := r.podmanBridgeName(ctx, name2)
		if err != nil || want == "" || info.BridgeName != want || !strings.HasPrefix(want, "podman") {
			t.Errorf("bridge name %q, Podman says %q (%v)", info.BridgeName, want, err)
		}
		return
	}
	// The bridge the engine named is a host interface of that name.
	if want := "br-" + nw2.ID[:12]; info.BridgeName != want {
		t.Errorf("bridge name %q, want %q", info.BridgeName, want)
	}
	if _, err := net.InterfaceByName(info.BridgeName); err != nil {
		t.Errorf("bridge %s: %v", info.BridgeName, err)
	}
}

func cleanupNetwork(t *testing.T, name string) {
	cli := rawClient(t)
	t.Cleanup(func() {
		if _, err := cli.NetworkRemove(context.Background(), name, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup network %s: %v", name, err)
		}
	})
}

func TestEnsureImageLocalOnly(t *testing.T) {
	r := newRuntime(t)
	ctx := context.Background()
	img := testimages.Busybox(ctx, t)
	var lines []string
	if err := r.EnsureImage(ctx, "~"+img, nil, func(l string) { lines = append(lines, l) }); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 0 {
		t.Errorf("a local image reported progress %q", lines)
	}
	err := r.EnsureImage(ctx, "~wharf-test/does-not-exist:"+randHex(4), nil, nil)
	if !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("missing local image = %v, want ErrNotFound", err)
	}
}

func TestEnsureImagePullFailureUsesLocalImage(t *testing.T) {
	r := newRuntime(t)
	cli := rawClient(t)
	ctx := context.Background()
	img := testimages.Busybox(ctx, t)
	tag := "registry.invalid/wharf-test-pull-" + randHex(4) + ":1"
	if _, err := cli.ImageTag(ctx, client.ImageTagOptions{Source: img, Target: tag}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := cli.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{}); err != nil {
			t.Errorf("cleanup image %s: %v", tag, err)
		}
	})
	var lines []string
	auth := &runtime.RegistryAuth{Username: "u", Password: "p"}
	if err := r.EnsureImage(ctx, tag, auth, func(l string) { lines = append(lines, l) }); err != nil {
		t.Fatalf("pull failure with a local image: %v", err)
	}
	if len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], "Warning:") {
		t.Errorf("progress %q has no warning", lines)
	}

	missing := "registry.invalid/wharf-test-missing-" + randHex(4) + ":1"
	if err := r.EnsureImage(ctx, missing, nil, nil); err == nil {
		t.Error("pull of a missing image without a local copy succeeded")
	}
}

// TestNoFDLeak opens and closes 200 inspects and stats streams and checks
// that the process's open descriptors do not grow (Wings §14.25).
func TestNoFDLeak(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "fdleak")
	startGameServer(t, r, spec)
	ctx := context.Background()
	cycle := func() {
		if _, err := r.Inspect(ctx, spec.Name); err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		ch, err := r.Stats(sctx, spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		for range ch {
		}
	}
	for range 10 { // warm the connection pool
		cycle()
	}
	before := countFDs(t)
	for range 200 {
		cycle()
	}
	// Closed connections take a moment to leave the table: wait for it.
	var after int
	if !wait.Until(5*time.Second, func() bool { after = countFDs(t); return after <= before+5 }) {
		t.Errorf("open descriptors grew from %d to %d over 200 cycles", before, after)
	}
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// checkDockerSpec checks what Docker reports of the hardened spec of
// TestCreateMapsSpecOntoContainer.
func checkDockerSpec(t *testing.T, hc *container.HostConfig, data string) {
	t.Helper()
	if hc.OomKillDisable == nil || *hc.OomKillDisable {
		t.Errorf("OomKillDisable = %v, want false", hc.OomKillDisable)
	}
	if got := strings.Join(hc.SecurityOpt, ","); got != "no-new-privileges" {
		t.Errorf("SecurityOpt = %s", got)
	}
	capDrop := strings.ToLower(strings.Join(hc.CapDrop, ","))
	for _, want := range []string{"setpcap", "mknod", "audit_write", "net_raw", "dac_override", "fowner", "fsetid", "net_bind_service", "sys_chroot", "setfcap", "sys_ptrace"} {
		if !strings.Contains(capDrop, want) {
			t.Errorf("CapDrop %q lacks %s", capDrop, want)
		}
	}
	if hc.Tmpfs["/tmp"] != "rw,exec,nosuid,size=16M" || hc.LogConfig.Type != "local" || hc.LogConfig.Config["max-size"] != "5m" || hc.LogConfig.Config["mode"] != "non-blocking" {
		t.Errorf("Tmpfs %v, LogConfig %+v", hc.Tmpfs, hc.LogConfig)
	}
	if len(hc.Mounts) != 1 || hc.Mounts[0].Source != data || hc.Mounts[0].Target != "/home/container" || hc.Mounts[0].ReadOnly {
		t.Errorf("Mounts = %+v", hc.Mounts)
	}
}

// checkPodmanSpec checks what Podman reports of the same spec: Docker's
// default seccomp profile as a file, the log bounded (Podman's own inspect
// has the size), bounded /run and /var/tmp. Podman's compatible inspect
// lists only the capabilities dropped from its own (smaller) default set
// and no bind mounts; the test checks both from inside the container.
func checkPodmanSpec(t *testing.T, r *Runtime, name string, hc *container.HostConfig) {
	t.Helper()
	if len(hc.SecurityOpt) != 2 || hc.SecurityOpt[0] != "no-new-privileges" || !strings.HasPrefix(hc.SecurityOpt[1], "seccomp=/") {
		t.Errorf("SecurityOpt = %v, want no-new-privileges and a profile file", hc.SecurityOpt)
	}
	for dir, want := range map[string]string{"/tmp": "size=16M", "/run": "size=16M", "/var/tmp": "size=16M"} {
		if !strings.Contains(hc.Tmpfs[dir], want) {
			t.Errorf("Tmpfs %s = %q, want %s", dir, hc.Tmpfs[dir], want)
		}
	}
	var lc struct {
		HostConfig struct {
			LogConfig struct{ Type, Size string }
		}
	}
	if err := r.libpodGet(context.Background(), "/containers/"+name+"/json", &lc); err != nil {
		t.Fatal(err)
	}
	if lc.HostConfig.LogConfig.Type != "k8s-file" || lc.HostConfig.LogConfig.Size != "5MB" {
		t.Errorf("Podman's log config = %+v, want k8s-file of 5MB", lc.HostConfig.LogConfig)
	}
}
