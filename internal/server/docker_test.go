package server

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/runtime"
)

// The websocket layer forwards these events as they are: status starting,
// status running, then on stop status stopping, status offline and a stats
// event with the usage reset.
func TestDockerEventsStartStop(t *testing.T) {
	def := gameDef(nil)
	e := newDockerEnv(t, envOptions{}, def)
	s := e.server(def.UUID)
	sub := s.Events().Subscribe(4096)
	defer sub.Close()

	if err := s.Power(context.Background(), PowerStart, time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, sub, events.Status); ev.Args[0] != "starting" {
		t.Fatalf("first status %v", ev.Args)
	}
	if ev := nextEvent(t, sub, events.Status); ev.Args[0] != "running" {
		t.Fatalf("second status %v", ev.Args)
	}
	// Stats flow while running (Docker samples about once a second).
	for {
		u := decodeStats(t, nextEvent(t, sub, events.Stats))
		if u.MemoryBytes > 0 && u.Uptime > 0 {
			if u.State != Running || u.MemoryLimitBytes == 0 {
				t.Fatalf("running stats %+v", u)
			}
			break
		}
	}

	if err := s.Power(context.Background(), PowerStop, time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, sub, events.Status); ev.Args[0] != "stopping" {
		t.Fatalf("status after stop %v", ev.Args)
	}
	if ev := nextEvent(t, sub, events.Status); ev.Args[0] != "offline" {
		t.Fatalf("status after stopping %v", ev.Args)
	}
	u := decodeStats(t, nextEvent(t, sub, events.Stats))
	if u.MemoryBytes != 0 || u.CPUAbsolute != 0 || u.Uptime != 0 || u.Network.RxBytes != 0 || u.Network.TxBytes != 0 ||
		u.State != Offline || u.MemoryLimitBytes == 0 {
		t.Fatalf("stats on offline not reset by the rule: %+v", u)
	}
	waitConsole(t, s, "Stopping server")
	// A clean stop is not a crash.
	for _, l := range s.ConsoleLines(100) {
		if strings.Contains(l, "crashed") {
			t.Fatalf("stop reported as a crash: %s", l)
		}
	}
}

// A kill while the server is starting wins: the start is cancelled and the
// server ends offline with no container running.
func TestDockerKillWhileStarting(t *testing.T) {
	def := gameDef(map[string]any{"GAMESERVER_STARTUP_DELAY": "1h"})
	e := newDockerEnv(t, envOptions{}, def)
	s := e.server(def.UUID)
	if err := s.PowerAsync(PowerStart, 0); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Starting)
	waitConsole(t, s, "Preparing level")
	if err := s.PowerAsync(PowerKill, 0); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Offline)
	st, err := e.rt.Inspect(context.Background(), def.UUID)
	if err != nil || st.Running {
		t.Fatalf("container after kill: %+v, %v", st, err)
	}
	// The lock was released: a new start is accepted and runs.
	if err := s.Power(context.Background(), PowerStart, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Starting)
	if err := s.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Offline)
}

// A kill cancels the action holding the lock, not the ones waiting for it:
// a start queued behind the holder runs once the kill is done.
func TestDockerKillLetsAQueuedStartRun(t *testing.T) {
	def := gameDef(nil)
	e := newDockerEnv(t, envOptions{}, def)
	s := e.server(def.UUID)
	// Hold the lock so that the start waits.
	holdPowerLock(t, s)
	if err := s.PowerAsync(PowerStart, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Running) // the waiting start went on after the kill
	if err := s.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Offline)
}

// A stop that does not finish in time escalates to a kill.
func TestDockerStopTimeoutEscalatesToKill(t *testing.T) {
	def := gameDef(nil)
	def.ProcessConfiguration["stop"] = map[string]any{"type": "command", "value": "please-stop"}
	e := newDockerEnv(t, envOptions{stopTimeout: 2 * time.Second}, def)
	s := e.server(def.UUID)
	if err := s.Power(context.Background(), PowerStart, time.Second); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Running)
	if err := s.Power(context.Background(), PowerStop, time.Second); err != nil {
		t.Fatal(err)
	}
	if s.State() != Offline {
		t.Fatalf("state %s after an escalated stop", s.State())
	}
	waitConsole(t, s, "Unknown command: please-stop")
	waitConsole(t, s, "did not stop in time")
}

// The power lock: one action at a time; wait 0 on a busy lock is refused;
// flags refuse start/stop/restart; kill bypasses both.
func TestDockerPowerLockAndFlags(t *testing.T) {
	def := gameDef(nil)
	e := newDockerEnv(t, envOptions{}, def)
	s := e.server(def.UUID)
	release := holdPowerLock(t, s)
	if err := s.PowerAsync(PowerStart, 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("start with a busy lock and wait 0: %v", err)
	}
	if err := s.Power(context.Background(), PowerStart, 100*time.Millisecond); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("start with a busy lock: %v", err)
	}
	release()

	// Two concurrent starts: one starts the server, the other finds it running.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = s.Power(context.Background(), PowerStart, 30*time.Second) })
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs...), ErrRunning) {
		t.Fatalf("concurrent starts: %v", errs)
	}
	waitState(t, s, Running)

	for _, job := range []struct {
		job  JobKind
		want error
	}{
		{JobInstall, ErrInstalling},
		{JobReinstall, ErrInstalling},
		{JobTransferOut, ErrTransferring},
		{JobTransferIn, ErrTransferring},
		{JobRestore, ErrRestoring},
	} {
		_, end, err := beginJob(s, context.Background(), job.job)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []PowerAction{PowerStart, PowerStop, PowerRestart} {
			if err := s.PowerAsync(a, 0); !errors.Is(err, job.want) {
				t.Errorf("%s during %s: %v, want %v", a, job.job, err, job.want)
			}
		}
		end()
	}
	_, end, err := beginJob(s, context.Background(), JobInstall)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PowerAsync(PowerKill, 0); err != nil {
		t.Fatalf("kill while installing: %v", err)
	}
	waitState(t, s, Offline)
	end()
}

// A crash restarts the server; a second crash within the timeout does not.
func TestDockerCrashDetection(t *testing.T) {
	def := gameDef(nil)
	e := newDockerEnv(t, envOptions{}, def)
	s := e.server(def.UUID)
	sub := s.Events().Subscribe(4096)
	defer sub.Close()
	if err := s.Power(context.Background(), PowerStart, time.Second); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Running)
	if err := s.SendCommand("crash"); err != nil {
		t.Fatal(err)
	}
	// running → offline (crash) → starting → running (automatic restart)
	want := []string{"starting", "running", "offline", "starting", "running"}
	for i, w := range want {
		if ev := nextEvent(t, sub, events.Status); ev.Args[0] != w {
			t.Fatalf("status %d = %v, want %s", i, ev.Args, w)
		}
	}
	waitConsole(t, s, "Detected server process in a crashed state")
	waitConsole(t, s, "Exit code: 1")

	if err := s.SendCommand("crash"); err != nil {
		t.Fatal(err)
	}
	waitConsole(t, s, "last crash occurred less than 60 seconds ago")
	if st := s.State(); st != Offline {
		t.Fatalf("state after a second crash: %s", st)
	}
}

func TestDockerCrashDetectionDisabled(t *testing.T) {
	def := gameDef(nil)
	def.Settings["crash_detection_enabled"] = false
	e := newDockerEnv(t, envOptions{}, def)
	s := e.server(def.UUID)
	if err := s.Power(context.Background(), PowerStart, time.Second); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Running)
	if err := s.SendCommand("crash"); err != nil {
		t.Fatal(err)
	}
	waitConsole(t, s, "crash detection is disabled")
	if s.State() != Offline {
		t.Fatalf("state %s", s.State())
	}
}

type fakeSession struct {
	mu    sync.Mutex
	codes []int
}

func (f *fakeSession) User() string { return "u1" }
func (f *fakeSession) Close(code int, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.codes = append(f.codes, code)
}

// A suspension seen by a sync stops the server and closes its sessions with 1000.
func TestDockerSuspendThroughSync(t *testing.T) {
	def := gameDef(nil)
	e := newDockerEnv(t, envOptions{}, def)
	s := e.server(def.UUID)
	sess := &fakeSession{}
	remove := s.AddSession(sess)
	defer remove()
	if err := s.Power(context.Background(), PowerStart, time.Second); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Running)
	e.panel.UpdateSettings(def.UUID, "suspended", true)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Offline)
	sess.mu.Lock()
	codes := append([]int(nil), sess.codes...)
	sess.mu.Unlock()
	if len(codes) != 1 || codes[0] != CloseSuspended {
		t.Fatalf("session closes %v, want [1000]", codes)
	}
	if !s.IsSuspended() {
		t.Fatal("not suspended")
	}
	if err := s.PowerAsync(PowerStart, 0); !errors.Is(err, ErrSuspended) {
		t.Fatalf("start while suspended: %v", err)
	}
}

// Delete leaves no container, no files and no goroutine of the server.
func TestDockerDeleteLeavesNothing(t *testing.T) {
	def := gameDef(nil)
	e := newDockerEnv(t, envOptions{}, def)
	s := e.server(def.UUID)
	sub := s.Events().Subscribe(4096)
	if err := s.Power(context.Background(), PowerStart, time.Second); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Running)
	// A power action waiting for the lock, and a session, when the delete comes.
	holdPowerLock(t, s)
	if err := s.PowerAsync(PowerRestart, 300*time.Second); err != nil {
		t.Fatal(err)
	}
	sess := &fakeSession{}
	s.AddSession(sess)
	dir := s.DataDir()
	if err := e.m.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.m.Get(def.UUID); ok {
		t.Fatal("still in the manager")
	}
	if _, err := e.rt.Inspect(context.Background(), def.UUID); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("container still there: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("files still there: %v", err)
	}
	if g := serverGoroutines(); len(g) != 0 {
		t.Fatalf("%d goroutines of the server remain:\n%s", len(g), strings.Join(g, "\n\n"))
	}
	if len(sess.codes) != 1 || sess.codes[0] != CloseDeleted {
		t.Fatalf("session closes %v", sess.codes)
	}
	// The event stream is closed, after a deleted event.
	var sawDeleted bool
	for ev := range sub.C {
		sawDeleted = sawDeleted || ev.Name == events.Deleted
	}
	if !sawDeleted {
		t.Fatal("no deleted event")
	}
	if err := s.PowerAsync(PowerStart, 0); !errors.Is(err, ErrDeleted) {
		t.Fatalf("power on a deleted server: %v", err)
	}
}

// Two nodes sharing one Docker engine (a transferred server's name is the
// same on both): a container labelled for another node is never removed or
// killed on behalf of a server of this node; an unlabelled one (an older
// version's) is treated as ours.
func TestDockerDeleteLeavesOtherNodesContainer(t *testing.T) {
	const us, them = "0a0a0a0a-0000-4000-8000-00000000000a", "0b0b0b0b-0000-4000-8000-00000000000b"
	theirs, unlabelled := gameDef(nil), gameDef(nil)
	e := newDockerEnv(t, envOptions{mutate: func(c *config.Config) { c.UUID = us }}, theirs, unlabelled)
	ctx := context.Background()
	t.Cleanup(func() { _ = e.rt.Remove(context.Background(), theirs.UUID, "") })
	create := func(id, node string) {
		t.Helper()
		spec, _ := ServerContainerSpec(e.server(id).Definition().Config, e.cfg.Get(), e.server(id).DataDir())
		spec.Labels = ContainerLabels(e.server(id).Definition().Config, "server_process", node)
		if err := writeSystemFiles(e.cfg.Get(), id); err != nil {
			t.Fatal(err)
		}
		if err := e.rt.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	create(theirs.UUID, them)
	if err := e.rt.Start(ctx, theirs.UUID); err != nil {
		t.Fatal(err)
	}
	create(unlabelled.UUID, "")

	// Neither a create nor a failed start of ours touches their container.
	s := e.server(theirs.UUID)
	var other *runtime.OtherNodeError
	if err := s.CreateContainer(ctx); !errors.As(err, &other) || other.Node != them {
		t.Fatalf("CreateContainer over another node's container = %v", err)
	}
	if err := s.Power(ctx, PowerStart, time.Second); !errors.As(err, &other) {
		t.Fatalf("start over another node's container = %v", err)
	}
	if s.State() != Offline {
		t.Fatalf("state %s after the refused start", s.State())
	}
	if err := e.m.Delete(ctx, s); err != nil {
		t.Fatalf("Delete = %v, want nil (their container is simply not ours)", err)
	}
	if st, err := e.rt.Inspect(ctx, theirs.UUID); err != nil || !st.Running {
		t.Fatalf("the other node's container after our delete: %+v, %v", st, err)
	}

	if err := e.m.Delete(ctx, e.server(unlabelled.UUID)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt.Inspect(ctx, unlabelled.UUID); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("unlabelled container after the delete: %v, want ErrNotFound", err)
	}
}

// Console throttling: a flood gets one notice per window, and the console
// keeps working afterwards.
func TestDockerThrottleNotice(t *testing.T) {
	def := gameDef(nil)
	e := newDockerEnv(t, envOptions{mutate: func(c *config.Config) {
		c.Throttles.Lines, c.Throttles.LineResetInterval = 50, 60_000
	}}, def)
	s := e.server(def.UUID)
	if err := s.Power(context.Background(), PowerStart, time.Second); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Running)
	if err := s.SendCommand("flood 5000"); err != nil {
		t.Fatal(err)
	}
	waitConsole(t, s, "outputting console data too quickly")
	// The newest line of each read passes the throttle (a command's answer
	// after a flood is never lost), so the flood's last line comes; wait
	// for it rather than checking while the flood is still being read.
	waitConsole(t, s, "flood line 5000")
	notices, flood := 0, 0
	lines := s.ConsoleLines(1000)
	for _, l := range lines {
		if strings.Contains(l, "too quickly") {
			notices++
		}
		if strings.Contains(l, "flood line ") {
			flood++
		}
	}
	if notices != 1 {
		t.Fatalf("%d notices, want 1", notices)
	}
	// Unthrottled, the newest 1,000 lines would all be the flood's.
	if flood >= 900 {
		t.Fatalf("%d of the last %d lines are the flood's: it was not throttled", flood, len(lines))
	}
	t.Logf("%d of the flood's 5,000 lines passed (50 allowed, plus the last line of each read)", flood)
}

// Restore re-attaches a running container (same container, console and
// stats working) and starts a server that was running before a host reboot.
func TestDockerRestoreReattachAndReboot(t *testing.T) {
	running, rebooted := gameDef(nil), gameDef(nil)
	e := newDockerEnv(t, envOptions{}, running, rebooted)
	for _, id := range []string{running.UUID, rebooted.UUID} {
		s := e.server(id)
		if err := s.Power(context.Background(), PowerStart, time.Second); err != nil {
			t.Fatal(err)
		}
		waitState(t, s, Running)
	}
	before, err := inspectContainer(t, running.UUID)
	if err != nil {
		t.Fatal(err)
	}
	// A second manager on the same configuration: the daemon restarted.
	// The "host reboot" stopped the second container behind our back.
	deps := *e.m.deps
	e.m.Close() // detaches; containers keep running
	if err := e.rt.Signal(context.Background(), rebooted.UUID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	m2 := NewManager(context.Background(), &deps)
	t.Cleanup(m2.Close)
	if err := m2.LoadFromPanel(context.Background(), 50); err != nil {
		t.Fatal(err)
	}
	m2.Restore(context.Background())
	s, _ := m2.Get(running.UUID)
	if s.State() != Running {
		t.Fatalf("re-attached server state %s", s.State())
	}
	after, err := inspectContainer(t, running.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if after.ID != before.ID || after.State.StartedAt != before.State.StartedAt {
		t.Fatalf("container re-created or restarted: %s %s -> %s %s", before.ID, before.State.StartedAt, after.ID, after.State.StartedAt)
	}
	waitConsole(t, s, "Done (") // the ring was filled from the container log
	if err := s.SendCommand("echo reattached-ok"); err != nil {
		t.Fatal(err)
	}
	waitConsole(t, s, "reattached-ok")
	sub := s.Events().Subscribe(64)
	defer sub.Close()
	if u := decodeStats(t, nextEvent(t, sub, events.Stats)); u.MemoryBytes == 0 || u.Uptime <= 0 {
		t.Fatalf("stats after re-attach %+v", u)
	}

	r, _ := m2.Get(rebooted.UUID)
	waitState(t, r, Running)
	waitConsole(t, r, "Done (")
}
