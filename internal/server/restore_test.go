package server

import (
	"context"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/runtime/runtimetest"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// restartManager closes e's manager (the containers keep running) and
// loads a second one on the same configuration and engine: the daemon
// restarted. Attaches to the engine wait for gate.
func (e *fakeEnv) restartManager(gate <-chan struct{}) *Manager {
	e.t.Helper()
	deps := *e.m.deps
	e.m.Close()
	e.rt.HoldAttach(gate)
	m2 := NewManager(context.Background(), &deps)
	e.t.Cleanup(m2.Close)
	if err := m2.LoadFromPanel(context.Background(), 50); err != nil {
		e.t.Fatal(err)
	}
	return m2
}

// Issue 38 §1: Restore returns before the running container is re-attached
// (one list call, no wait for the engine's attach); the server is running
// for a request meanwhile, and a command sent then waits for the re-attach
// (not refused, not lost).
func TestRestoreAnswersBeforeReattach(t *testing.T) {
	e, s := newFakeEnv(t, runtimetest.Process{StopCommand: "stop"})
	e.running(s)
	gate := make(chan struct{})
	m2 := e.restartManager(gate)
	m2.Restore(context.Background()) // returns with the attach held
	s2, _ := m2.Get(s.UUID())
	if got := s2.State(); got != Running {
		t.Fatalf("state before the re-attach: %s, want running (the engine listed it)", got)
	}
	if n := e.rt.Count("list"); n != 1 {
		t.Fatalf("%d list calls, want 1: %v", n, e.rt.Calls())
	}
	if s2.restorePending() == nil {
		t.Fatal("no re-attach pending while the engine holds the attach")
	}
	cmdErr := make(chan error, 1)
	go func() { cmdErr <- s2.SendCommand("say hello") }()
	select {
	case err := <-cmdErr:
		t.Fatalf("the command did not wait for the re-attach: %v", err)
	default:
	}
	close(gate)
	if err := <-cmdErr; err != nil {
		t.Fatalf("command after the re-attach: %v", err)
	}
	wait.For(t, 10*time.Second, func() bool { return consoleHas(s2, "Unknown command: say hello") },
		"the command's answer on the re-attached console")
	if s2.State() != Running {
		t.Fatalf("state after the re-attach: %s", s2.State())
	}
}

// A stop sent during the re-attach at boot waits for it (it is neither
// refused as "another power action runs" nor run on an unattached server).
func TestRestoreStopWaitsForReattach(t *testing.T) {
	e, s := newFakeEnv(t, runtimetest.Process{StopCommand: "stop"})
	e.running(s)
	gate := make(chan struct{})
	m2 := e.restartManager(gate)
	m2.Restore(context.Background())
	s2, _ := m2.Get(s.UUID())
	if err := s2.PowerAsync(PowerStop, 0); err != nil {
		t.Fatalf("stop during the re-attach: %v (it must wait for it)", err)
	}
	if !e.rt.Running(s.UUID()) || s2.State() != Running {
		t.Fatalf("the stop ran before the re-attach: state %s", s2.State())
	}
	close(gate)
	waitState(t, s2, Offline)
	if e.rt.Running(s.UUID()) {
		t.Fatal("the container still runs after the stop")
	}
}

// A kill during the re-attach at boot is not lost: the container dies and
// the server is offline.
func TestRestoreKillDuringReattach(t *testing.T) {
	e, s := newFakeEnv(t, runtimetest.Process{StopCommand: "stop"})
	e.running(s)
	gate := make(chan struct{})
	defer close(gate)
	m2 := e.restartManager(gate)
	m2.Restore(context.Background())
	s2, _ := m2.Get(s.UUID())
	if err := s2.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitState(t, s2, Offline)
	if e.rt.Running(s.UUID()) {
		t.Fatal("the container still runs after the kill")
	}
}

// A container that stopped between the boot's list and its re-attach
// leaves the server offline, not running.
func TestRestoreContainerGoneBeforeReattach(t *testing.T) {
	e, s := newFakeEnv(t, runtimetest.Process{StopCommand: "stop"})
	e.running(s)
	gate := make(chan struct{})
	m2 := e.restartManager(gate)
	m2.Restore(context.Background())
	s2, _ := m2.Get(s.UUID())
	if err := e.rt.Signal(context.Background(), s.UUID(), "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	close(gate)
	waitState(t, s2, Offline)
}
