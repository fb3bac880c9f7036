package runtimetest

import (
	"bufio"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/runtime"
)

// run creates, attaches and starts container c; the output's lines are
// sent on the returned channel, closed at the end of the output.
func run(t *testing.T, r *Runtime, name string) (runtime.Stream, <-chan string) {
	t.Helper()
	ctx := context.Background()
	if err := r.Create(ctx, runtime.ContainerSpec{Name: name}); err != nil {
		t.Fatal(err)
	}
	st, err := r.Attach(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(st)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	if err := r.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
	return st, lines
}

func drain(lines <-chan string) []string {
	var out []string
	for l := range lines {
		out = append(out, l)
	}
	return out
}

func TestStopCommandObeyedOrIgnored(t *testing.T) {
	r := New(Process{StopCommand: "stop"})
	st, lines := run(t, r, "a")
	if _, err := st.Write([]byte("hello\nstop\n")); err != nil {
		t.Fatal(err)
	}
	got := drain(lines)
	if len(got) != 4 || got[2] != "Unknown command: hello" || got[3] != "Stopping" {
		t.Fatalf("output %q", got)
	}
	if s, err := r.Wait(context.Background(), "a"); err != nil || s.ExitCode != 0 || r.Running("a") {
		t.Fatalf("after the stop command: %+v, %v", s, err)
	}

	r.SetProcess(Process{IgnoreSignals: true}) // ignores its stop command and SIGTERM
	st, lines = run(t, r, "b")
	if _, err := st.Write([]byte("stop\n")); err != nil {
		t.Fatal(err)
	}
	if err := r.Signal(context.Background(), "b", "SIGTERM"); err != nil || !r.Running("b") {
		t.Fatalf("SIGTERM: %v, running %v", err, r.Running("b"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.Stop(ctx, "b", time.Hour); !errors.Is(err, context.DeadlineExceeded) || !r.Running("b") {
		t.Fatalf("a stop that ends with its context: %v, running %v", err, r.Running("b"))
	}
	if err := r.Stop(context.Background(), "b", 10*time.Millisecond); err != nil || r.Running("b") {
		t.Fatalf("the engine's stop kills after its timeout: %v, running %v", err, r.Running("b"))
	}
	drain(lines)
	if s, _ := r.Inspect(context.Background(), "b"); s.ExitCode != 137 {
		t.Fatalf("exit code %d after the kill", s.ExitCode)
	}
	if err := r.Signal(context.Background(), "b", "SIGKILL"); !errors.Is(err, runtime.ErrNotRunning) {
		t.Fatalf("signal to an exited container: %v", err)
	}
	if err := r.Signal(context.Background(), "none", "SIGKILL"); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("signal to a missing container: %v", err)
	}
}

func TestStartGateAndSigkill(t *testing.T) {
	gate := make(chan struct{})
	r := New(Process{StartGate: gate})
	if err := r.Create(context.Background(), runtime.ContainerSpec{Name: "c"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.Start(ctx, "c"); !errors.Is(err, context.DeadlineExceeded) || r.Running("c") {
		t.Fatalf("a start held by the gate: %v", err)
	}
	close(gate)
	_, lines := run(t, r, "c")
	if err := r.Signal(context.Background(), "c", "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	if got := drain(lines); len(got) != 2 {
		t.Fatalf("output %q", got)
	}
	if n := r.Count("signal c SIGKILL"); n != 1 {
		t.Fatalf("calls %v", r.Calls())
	}
}
