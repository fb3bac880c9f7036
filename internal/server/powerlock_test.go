package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/runtime/runtimetest"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// The lock alone: one holder; wait 0 refuses a busy lock, a wait runs out,
// a waiter gets the lock when the holder releases it.
func TestPowerLockWaitAndTimeout(t *testing.T) {
	var l powerLock
	_, release, ok := l.tryAcquire(context.Background())
	if !ok {
		t.Fatal("a free lock was refused")
	}
	if _, _, ok := l.tryAcquire(context.Background()); ok {
		t.Fatal("a held lock was taken twice")
	}
	if _, _, err := l.acquire(context.Background(), 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("wait 0 on a held lock: %v", err)
	}
	if _, _, err := l.acquire(context.Background(), 20*time.Millisecond); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("a wait that runs out: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := l.acquire(ctx, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiter whose context ends: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		_, r, err := l.acquire(context.Background(), time.Minute)
		if err == nil {
			r()
		}
		got <- err
	}()
	release()
	release() // a second release is harmless
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
}

// A kill cancels the holder's context and, until it ends, no waiter takes
// the lock, also once the holder is gone.
func TestPowerLockKillHoldsTheQueueUntilItEnds(t *testing.T) {
	var l powerLock
	hctx, release, _ := l.tryAcquire(context.Background())
	stop := context.AfterFunc(hctx, release) // a holder unwinds when cancelled
	defer stop()
	acquired := make(chan struct{})
	go func() {
		_, r, err := l.acquire(context.Background(), time.Minute)
		if err != nil {
			t.Error(err)
			return
		}
		close(acquired)
		r()
	}()
	end, unwound, err := l.beginKill(context.Background(), time.Minute)
	if err != nil || !unwound {
		t.Fatalf("beginKill: unwound %v, %v", unwound, err)
	}
	if !killed(hctx) {
		t.Fatalf("the holder was not cancelled by the kill: %v", context.Cause(hctx))
	}
	if _, _, ok := l.tryAcquire(context.Background()); ok {
		t.Fatal("the lock was taken during a kill")
	}
	select {
	case <-acquired:
		t.Fatal("a waiter took the lock during a kill")
	case <-time.After(100 * time.Millisecond):
	}
	end()
	<-acquired
}

// A holder that does not unwind is waited for only as long as the bound;
// a kill whose context ends gives up and holds nothing back.
func TestPowerLockKillBounds(t *testing.T) {
	var l powerLock
	_, release, _ := l.tryAcquire(context.Background())
	end, unwound, err := l.beginKill(context.Background(), 20*time.Millisecond)
	if err != nil || unwound {
		t.Fatalf("a holder that does not unwind: unwound %v, %v", unwound, err)
	}
	end()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := l.beginKill(ctx, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("a kill whose context ended: %v", err)
	}
	release()
	if _, r, ok := l.tryAcquire(context.Background()); !ok {
		t.Fatal("the lock stayed held after the kills ended")
	} else {
		r()
	}
}

// With the fake engine: an action waits for the holder, then runs.
func TestPowerQueuedActionRunsAfterTheHolder(t *testing.T) {
	gate := make(chan struct{})
	e, s := newFakeEnv(t, runtimetest.Process{StopCommand: "stop", StartGate: gate})
	if err := s.PowerAsync(PowerStart, 0); err != nil {
		t.Fatal(err)
	}
	e.waitCalls("start "+s.UUID(), 1)
	stopped := make(chan error, 1)
	go func() { stopped <- s.Power(context.Background(), PowerStop, 10*time.Second) }()
	if err := s.PowerAsync(PowerRestart, 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("restart with wait 0 while a start holds the lock: %v", err)
	}
	close(gate)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if s.State() != Offline || e.rt.Running(s.UUID()) {
		t.Fatalf("state %s, process running %v after the queued stop", s.State(), e.rt.Running(s.UUID()))
	}
}

// A queued action whose wait runs out says so on the console.
func TestPowerQueuedActionTimeoutSaysWhy(t *testing.T) {
	e, s := newFakeEnv(t, runtimetest.Process{}) // ignores its stop command
	e.running(s)
	e.stopping(s)
	if err := s.PowerAsync(PowerStart, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitConsole(t, s, "Power action start was not run: timed out waiting for the power lock.")
	if err := s.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Offline)
}

// A kill cancels the action holding the lock (a start the engine is slow
// to carry out) without waiting for its bound, and the server ends offline.
func TestPowerKillCancelsTheHolder(t *testing.T) {
	e, s := newFakeEnv(t, runtimetest.Process{StopCommand: "stop", StartGate: make(chan struct{})})
	if err := s.PowerAsync(PowerStart, 0); err != nil {
		t.Fatal(err)
	}
	e.waitCalls("start "+s.UUID(), 1)
	began := time.Now()
	if err := s.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took >= killWait {
		t.Fatalf("the kill waited %s: the start was not cancelled", took)
	}
	waitState(t, s, Offline)
	if e.rt.Running(s.UUID()) {
		t.Fatal("the process runs after the kill")
	}
	if consoleHas(s, "failed") {
		t.Fatalf("a cancelled start was reported as a failure: %v", s.ConsoleLines(100))
	}
	e.rt.SetProcess(runtimetest.Process{StopCommand: "stop"})
	e.running(s) // the lock is free again
}

// The defect of issue 12: a stop the process ignores, a start queued
// behind it, then a kill. The kill ends the stop, and the queued start
// waits for the kill to bring the server offline, then starts it; it does
// not meet the half-stopped server and drop with "already running".
func TestPowerQueuedStartAfterAKillEndsRunning(t *testing.T) {
	for _, wait := range []time.Duration{60 * time.Second, 30 * time.Second} {
		t.Run(wait.String(), func(t *testing.T) {
			e, s := newFakeEnv(t, runtimetest.Process{})
			e.running(s)
			e.stopping(s)
			if err := s.PowerAsync(PowerStart, wait); err != nil {
				t.Fatal(err)
			}
			if err := s.PowerAsync(PowerKill, 0); err != nil {
				t.Fatal(err)
			}
			e.waitCalls("signal "+s.UUID()+" SIGKILL", 1)
			waitState(t, s, Running)
			if n := e.rt.Count("start " + s.UUID()); n != 2 {
				t.Fatalf("%d starts, want 2: %v", n, e.rt.Calls())
			}
			if consoleHas(s, "Power action") {
				t.Fatalf("a power action was reported: %v", s.ConsoleLines(100))
			}
			if err := s.Kill(context.Background()); err != nil {
				t.Fatal(err)
			}
			waitState(t, s, Offline)
		})
	}
}

// Queued actions that cannot run once they get the lock say why: a job
// began while they waited, or the server already runs.
func TestPowerQueuedActionThatCannotRunSaysWhy(t *testing.T) {
	e, s := newFakeEnv(t, runtimetest.Process{})
	e.running(s)
	e.stopping(s)
	if err := s.PowerAsync(PowerStart, time.Minute); err != nil {
		t.Fatal(err)
	}
	_, end, err := beginJob(s, context.Background(), JobRestore)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PowerAsync(PowerKill, 0); err != nil {
		t.Fatal(err)
	}
	waitConsole(t, s, "Power action start was not run: Server is currently being restored.")
	end()
	waitState(t, s, Offline)
	e.waitLockFree(s) // the kill lets go of the lock after the state changed

	gate := make(chan struct{})
	e.rt.SetProcess(runtimetest.Process{StopCommand: "stop", StartGate: gate})
	if err := s.PowerAsync(PowerStart, 0); err != nil {
		t.Fatal(err)
	}
	e.waitCalls("start "+s.UUID(), 2)
	if err := s.PowerAsync(PowerStart, time.Minute); err != nil {
		t.Fatal(err)
	}
	close(gate)
	waitConsole(t, s, "Power action start was not run: Server is already running.")
}

// wait 0 is refused at once while an action holds the lock, and while a
// kill is in progress.
func TestPowerWaitZeroDuringAKill(t *testing.T) {
	e, s := newFakeEnv(t, runtimetest.Process{StopCommand: "stop"})
	e.running(s)
	end, _, err := s.power.beginKill(context.Background(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PowerAsync(PowerStop, 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("stop with wait 0 during a kill: %v", err)
	}
	end()
	if err := s.Power(context.Background(), PowerStop, 0); err != nil {
		t.Fatal(err)
	}
	if s.State() != Offline {
		t.Fatalf("state %s after the stop", s.State())
	}
}

// A reinstall stops the server through the power lock: a start in
// progress finishes first, then the reinstall stops it and installs.
func TestReinstallStopsThroughThePowerLock(t *testing.T) {
	gate := make(chan struct{})
	e, s := newFakeEnv(t, runtimetest.Process{StopCommand: "stop", StartGate: gate})
	s.mu.Lock()
	s.def.Config.SkipEggScripts = true
	s.mu.Unlock()
	e.panel.UpdateSettings(s.UUID(), "skip_egg_scripts", true)
	if err := s.PowerAsync(PowerStart, 0); err != nil {
		t.Fatal(err)
	}
	e.waitCalls("start "+s.UUID(), 1)
	if err := s.InstallAsync(true); err != nil {
		t.Fatal(err)
	}
	if !s.IsInstalling() {
		t.Fatal("not installing")
	}
	var busy *BusyError
	if err := s.InstallAsync(false); !errors.As(err, &busy) || busy.Running != JobReinstall {
		t.Fatalf("an install during a reinstall: %v", err)
	}
	close(gate) // the start goes on, then the reinstall stops the server
	if _, ok := e.panel.WaitForCall("POST", "/servers/"+s.UUID()+"/install", 30*time.Second); !ok {
		t.Fatal("the install was never reported")
	}
	waitState(t, s, Offline)
	if e.rt.Running(s.UUID()) {
		t.Fatal("the process runs after the reinstall")
	}
	if !consoleHas(s, "Stopping") {
		t.Fatalf("the process was not stopped with its stop command: %v", s.ConsoleLines(100))
	}
	wait.For(t, 10*time.Second, func() bool { return !s.IsInstalling() }, "the install to end")
}

// A daemon shutdown while the engine has not yet confirmed a start leaves
// the container alone: under load the game can run (and print its done
// line) before the engine answers, and the shutdown's cancellation used to
// make the start fail and kill it (e2e TestRestartRequestBeforeReattach
// failed with the container exited 137). A kill still ends such a start:
// TestPowerKillCancelsTheHolder.
func TestShutdownDuringStartLeavesTheContainer(t *testing.T) {
	e, s := newFakeEnv(t, runtimetest.Process{StartGate: make(chan struct{})})
	if err := s.PowerAsync(PowerStart, 0); err != nil {
		t.Fatal(err)
	}
	e.waitCalls("start "+s.UUID(), 1)
	e.m.Close() // the daemon's shutdown: waits for the start to return
	if n := e.rt.Count("signal " + s.UUID() + " SIGKILL"); n != 0 {
		t.Fatalf("the shutdown killed the container being started: %v", e.rt.Calls())
	}
	if st := s.State(); st != Starting {
		t.Fatalf("state %s after a shutdown during the start, want starting (saved so; the next boot re-attaches or starts it)", st)
	}
}
