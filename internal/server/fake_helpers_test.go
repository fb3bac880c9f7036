package server

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/runtime/runtimetest"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// fakeEnv is a Manager over the in-memory engine (runtimetest) and a
// devpanel backend: power actions without Docker.
type fakeEnv struct {
	t     testing.TB
	m     *Manager
	panel *devpanel.Panel
	rt    *runtimetest.Runtime
}

// newFakeEnv loads one server running the fake process proc. The stop
// timeout is long (a stop the process ignores holds the lock until killed).
// Each option may change the configuration and the dependencies first.
func newFakeEnv(t testing.TB, proc runtimetest.Process, options ...func(*config.Config, *Deps)) (*fakeEnv, *Server) {
	t.Helper()
	def := gameDef(nil)
	const tokenID, token = "tid", "node-token"
	p := devpanel.New(tokenID, token)
	p.PutServer(def)
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	c := config.Defaults()
	c.Remote, c.TokenID, c.Token = srv.URL, tokenID, token
	c.System.RootDirectory = filepath.Join(dir, "lib")
	c.System.Data = filepath.Join(dir, "lib", "volumes")
	c.System.LogDirectory = filepath.Join(dir, "log")
	c.System.TmpDirectory = filepath.Join(dir, "tmp")
	c.System.User.UID, c.System.User.GID = os.Getuid(), os.Getgid()
	for _, d := range []string{c.System.RootDirectory, c.System.Data, c.System.LogDirectory, c.System.TmpDirectory} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rt := runtimetest.New(proc)
	client := panel.New(func() panel.Settings {
		return panel.Settings{Remote: srv.URL, TokenID: tokenID, Token: token, Timeout: 10 * time.Second}
	}, "test")
	deps := &Deps{Runtime: rt, Panel: client, Log: log, StopTimeout: time.Hour}
	for _, option := range options {
		option(c, deps)
	}
	deps.Config = config.NewStore(filepath.Join(dir, "config.yml"), c)
	m := NewManager(context.Background(), deps)
	t.Cleanup(m.Close)
	if err := m.LoadFromPanel(context.Background(), 50); err != nil {
		t.Fatal(err)
	}
	e := &fakeEnv{t: t, m: m, panel: p, rt: rt}
	s, ok := m.Get(def.UUID)
	if !ok {
		t.Fatal("server not loaded")
	}
	return e, s
}

// running starts s and waits until it runs.
func (e *fakeEnv) running(s *Server) {
	e.t.Helper()
	if err := s.Power(context.Background(), PowerStart, time.Second); err != nil {
		e.t.Fatal(err)
	}
	waitState(e.t, s, Running)
}

// stopping sends a stop the process ignores and waits until the server is
// stopping: the stop then holds the power lock.
func (e *fakeEnv) stopping(s *Server) {
	e.t.Helper()
	if err := s.PowerAsync(PowerStop, time.Second); err != nil {
		e.t.Fatal(err)
	}
	waitState(e.t, s, Stopping)
	e.waitLockHeld(s)
}

// waitLockHeld waits until an action holds the power lock.
func (e *fakeEnv) waitLockHeld(s *Server) {
	e.t.Helper()
	wait.For(e.t, 10*time.Second, func() bool {
		s.power.mu.Lock()
		defer s.power.mu.Unlock()
		return s.power.held
	}, "an action to take the power lock")
}

// waitLockFree waits until an action may take the power lock: a kill (and
// the stop it ended) report offline a moment before they let go of it.
func (e *fakeEnv) waitLockFree(s *Server) {
	e.t.Helper()
	wait.For(e.t, 10*time.Second, func() bool {
		s.power.mu.Lock()
		defer s.power.mu.Unlock()
		return s.power.free()
	}, "the power lock to be released")
}

// waitCalls waits until the engine was asked call n times.
func (e *fakeEnv) waitCalls(call string, n int) {
	e.t.Helper()
	if !wait.Until(10*time.Second, func() bool { return e.rt.Count(call) >= n }) {
		e.t.Fatalf("%q asked %d times, want %d: %v", call, e.rt.Count(call), n, e.rt.Calls())
	}
}

// consoleHas reports whether a console line contains substr.
func consoleHas(s *Server, substr string) bool {
	return slices.ContainsFunc(s.ConsoleLines(100), func(l string) bool { return strings.Contains(l, substr) })
}
