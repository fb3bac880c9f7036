package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/moby/moby/api/types/container"
	dockerclient "github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/runtime/docker"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// dockerEnv is a Manager with real dependencies: the Docker engine, a
// devpanel backend over HTTP, a configuration in a temporary directory.
type dockerEnv struct {
	t     testing.TB
	m     *Manager
	panel *devpanel.Panel
	cfg   *config.Store
	rt    *docker.Runtime
}

type envOptions struct {
	mutate      func(c *config.Config)
	stopTimeout time.Duration
}

func newDockerEnv(t testing.TB, opts envOptions, servers ...devpanel.Server) *dockerEnv {
	t.Helper()
	testimages.RequireDocker(t)
	testimages.GameServer(context.Background(), t)
	const tokenID, token = "tid", "node-token"
	p := devpanel.New(tokenID, token)
	for _, s := range servers {
		p.PutServer(s)
	}
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
	c.System.Timezone = "UTC"
	c.Docker.Network.Mode = "bridge"
	if opts.mutate != nil {
		opts.mutate(c)
	}
	for _, d := range []string{c.System.RootDirectory, c.System.Data, c.System.LogDirectory, c.System.TmpDirectory} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	store := config.NewStore(filepath.Join(dir, "config.yml"), c)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rt, err := docker.New(context.Background(), docker.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	client := panel.New(func() panel.Settings {
		return panel.Settings{Remote: srv.URL, TokenID: tokenID, Token: token, Timeout: 10 * time.Second}
	}, "test")
	m := NewManager(context.Background(), &Deps{Runtime: rt, Panel: client, Config: store, Log: log, StopTimeout: opts.stopTimeout})
	e := &dockerEnv{t: t, m: m, panel: p, cfg: store, rt: rt}
	t.Cleanup(func() {
		// Containers are left running by Close (restart safety): remove them.
		ids := make([]string, 0)
		for _, s := range m.All() {
			ids = append(ids, s.UUID())
		}
		m.Close()
		for _, id := range ids {
			_ = rt.Remove(context.Background(), id, "")
			_ = rt.Remove(context.Background(), id+"_installer", "")
		}
		_ = rt.Close() // its idle connections to the engine would outlive the test
	})
	if err := m.LoadFromPanel(context.Background(), 50); err != nil {
		t.Fatal(err)
	}
	return e
}

// testWriter sends the daemon's log to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// gameDef is a server running the fake game server.
func gameDef(env map[string]any) devpanel.Server {
	id := uuid.NewString()
	if env == nil {
		env = map[string]any{}
	}
	return devpanel.Server{
		UUID: id,
		Settings: map[string]any{
			"uuid": id, "invocation": "gameserver", "environment": env,
			"build":     map[string]any{"memory_limit": 128, "cpu_limit": 100},
			"container": map[string]any{"image": "~" + testimages.GameServerTag},
		},
		ProcessConfiguration: map[string]any{
			"startup": map[string]any{"done": []string{"Done ("}},
			"stop":    map[string]any{"type": "command", "value": "stop"},
		},
	}
}

func (e *dockerEnv) server(id string) *Server {
	e.t.Helper()
	s, ok := e.m.Get(id)
	if !ok {
		e.t.Fatalf("server %s not loaded", id)
	}
	return s
}

// waitState waits for a state (a generous bound: CI machines are slow).
func waitState(t testing.TB, s *Server, want State) {
	t.Helper()
	if !s.waitForState(context.Background(), want, 60*time.Second) {
		t.Fatalf("server did not reach %s (state %s); console:\n%s", want, s.State(), strings.Join(s.ConsoleLines(100), "\n"))
	}
}

// waitConsole waits until a console line contains substr.
func waitConsole(t testing.TB, s *Server, substr string) {
	t.Helper()
	if !wait.Until(30*time.Second, func() bool { return consoleHas(s, substr) }) {
		t.Fatalf("console never showed %q:\n%s", substr, strings.Join(s.ConsoleLines(100), "\n"))
	}
}

// nextEvent returns the next event with one of the names, skipping others.
func nextEvent(t testing.TB, sub *events.Subscription, names ...string) events.Event {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case e, ok := <-sub.C:
			if !ok {
				t.Fatal("event stream closed")
			}
			for _, n := range names {
				if e.Name == n {
					return e
				}
			}
		case <-timeout:
			t.Fatalf("no %v event", names)
		}
	}
}

func decodeStats(t testing.TB, e events.Event) Utilization {
	t.Helper()
	var u Utilization
	if len(e.Args) != 1 || json.Unmarshal([]byte(e.Args[0]), &u) != nil {
		t.Fatalf("bad stats event %v", e)
	}
	return u
}

// serverGoroutines lists the goroutines running code of a *Server.
func serverGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "internal/server.(*Server)") {
			out = append(out, g)
		}
	}
	return out
}

// inspectContainer asks the engine directly about a container (not through
// the runtime, whose State hides the ID).
func inspectContainer(t *testing.T, name string) (container.InspectResponse, error) {
	res, err := testimages.Client(t).ContainerInspect(context.Background(), name, dockerclient.ContainerInspectOptions{})
	return res.Container, err
}

// holdPowerLock takes the power lock as an action would: until release is
// called or a kill cancels it. It is released at the end of the test.
func holdPowerLock(t testing.TB, s *Server) (release func()) {
	t.Helper()
	ctx, release, ok := s.power.tryAcquire(context.Background())
	if !ok {
		t.Fatal("the power lock is busy")
	}
	stop := context.AfterFunc(ctx, release)
	t.Cleanup(func() { stop(); release() })
	return release
}
