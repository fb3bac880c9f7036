package server

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/runtime"
)

// hungRuntime is an engine that never answers: each call records its context's deadline and
// returns when that context ends. A call without a deadline would hang forever; it fails at
// once instead, so that the test reports it rather than hanging.
type hungRuntime struct {
	runtime.Runtime // any other method panics: the test must not reach it

	mu        sync.Mutex
	deadlines map[string]time.Time // call -> deadline of its context
}

var errNoDeadline = errors.New("clean-up call without a time limit")

func (h *hungRuntime) hang(ctx context.Context, call string) error {
	dl, ok := ctx.Deadline()
	if !ok {
		return errNoDeadline
	}
	h.mu.Lock()
	h.deadlines[call] = dl
	h.mu.Unlock()
	return context.DeadlineExceeded // what the call returns once the bound has passed
}

func (h *hungRuntime) Signal(ctx context.Context, name, _ string) error {
	return h.hang(ctx, "signal "+name)
}

func (h *hungRuntime) Remove(ctx context.Context, name, _ string) error {
	return h.hang(ctx, "remove "+name)
}

// Deleting a running server on a hung engine is bounded, even when the caller's context never
// ends (the transfer's clean-up detaches from its own): the kill and the container removals
// each get CleanupTimeout.
func TestDeleteBoundedOnHungEngine(t *testing.T) {
	m, s, rt := hungServer(t)
	s.setState(Running)

	start := time.Now()
	err := m.Delete(context.Background(), s)
	if errors.Is(err, errNoDeadline) {
		t.Fatalf("a clean-up call had no time limit: %v", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Delete = %v, want the removals' deadline error", err)
	}
	end := time.Now()
	id := s.UUID()
	for _, call := range []string{"signal " + id, "remove " + id, "remove " + id + "_installer"} {
		dl, ok := rt.deadlines[call]
		if !ok {
			t.Errorf("%s: not called with a deadline (calls: %v)", call, rt.deadlines)
			continue
		}
		if dl.Before(start) || dl.After(end.Add(CleanupTimeout)) {
			t.Errorf("%s: deadline %v not within CleanupTimeout of the call", call, dl)
		}
	}
}

// failingCreate is an engine on which creating the container fails and the clean-up kill that
// follows hangs: the kill must be bounded by CleanupTimeout even though the start's context is
// never cancelled.
type failingCreate struct {
	*hungRuntime
}

var errCreate = errors.New("create failed")

func (failingCreate) EnsureImage(context.Context, string, *runtime.RegistryAuth, func(string)) error {
	return nil
}

func (failingCreate) Create(context.Context, runtime.ContainerSpec) error { return errCreate }

func TestStartFailureCleanupBounded(t *testing.T) {
	dir := t.TempDir()
	def := gameDef(nil)
	p := devpanel.New("tid", "node-token")
	p.PutServer(def)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	c := config.Defaults()
	c.System.Data = filepath.Join(dir, "volumes")
	c.System.RootDirectory = dir
	c.System.User.UID, c.System.User.GID = -1, -1
	rt := failingCreate{&hungRuntime{deadlines: map[string]time.Time{}}}
	client := panel.New(func() panel.Settings {
		return panel.Settings{Remote: srv.URL, TokenID: "tid", Token: "node-token", Timeout: 10 * time.Second}
	}, "test")
	m := NewManager(context.Background(), &Deps{Runtime: rt, Panel: client, Config: config.NewStore(filepath.Join(dir, "config.yml"), c)})
	defer m.Close()
	if err := m.LoadFromPanel(context.Background(), 50); err != nil {
		t.Fatal(err)
	}
	s, ok := m.Get(def.UUID)
	if !ok {
		t.Fatal("server not loaded")
	}
	start := time.Now()
	if err := s.Power(context.Background(), PowerStart, time.Second); !errors.Is(err, errCreate) {
		t.Fatalf("start = %v, want the create error", err)
	}
	dl, ok := rt.deadlines["signal "+def.UUID]
	if !ok {
		t.Fatalf("the kill after the failed start had no time limit (calls: %v)", rt.deadlines)
	}
	if dl.After(time.Now().Add(CleanupTimeout)) || dl.Before(start) {
		t.Fatalf("kill deadline %v not within CleanupTimeout", dl)
	}
	if s.State() != Offline {
		t.Fatalf("state after a failed start %s", s.State())
	}
}

// hungServer is a manager on a hung engine (every call waits for its
// context) holding one server with no container.
func hungServer(t *testing.T) (*Manager, *Server, *hungRuntime) {
	t.Helper()
	dir := t.TempDir()
	c := config.Defaults()
	c.System.Data = filepath.Join(dir, "volumes")
	c.System.RootDirectory = dir
	c.System.User.UID, c.System.User.GID = -1, -1
	rt := &hungRuntime{deadlines: map[string]time.Time{}}
	m := NewManager(context.Background(), &Deps{Runtime: rt, Config: config.NewStore(filepath.Join(dir, "config.yml"), c)})
	var def Definition
	def.Config.UUID = uuid.NewString()
	s, err := m.Add(def)
	if err != nil {
		t.Fatal(err)
	}
	return m, s, rt
}
