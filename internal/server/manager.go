package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/wharf/wharf/internal/atomicfile"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/sandbox"
)

// Manager holds the servers of this node and persists their states, so that
// servers that were running when the host went down start again.
type Manager struct {
	deps *Deps
	log  *slog.Logger
	ctx  context.Context

	mu      sync.RWMutex
	servers map[string]*Server

	stateMu sync.Mutex
	states  map[string]State

	monMu   sync.Mutex
	monStop func() // stops the disk monitor and waits for it; nil when not started
}

// NewManager returns an empty manager; ctx is the node's lifetime.
func NewManager(ctx context.Context, deps *Deps) *Manager {
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	return &Manager{deps: deps, log: deps.Log, ctx: ctx, servers: make(map[string]*Server), states: map[string]State{}}
}

// Get returns the server with the given UUID.
func (m *Manager) Get(uuid string) (*Server, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, ok := m.servers[uuid]
	return s, ok
}

// All returns every server, ordered by UUID.
func (m *Manager) All() []*Server {
	m.mu.RLock()
	out := make([]*Server, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s)
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].UUID() < out[j].UUID() })
	return out
}

// Add builds a server for def and registers it.
func (m *Manager) Add(def Definition) (*Server, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.servers[def.Config.UUID]; ok {
		return nil, ErrExists
	}
	files, err := m.openFiles(def.Config)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", def.Config.UUID, err)
	}
	s := newServer(m.ctx, m.deps, def, files, m.recordState)
	m.servers[def.Config.UUID] = s
	return s, nil
}

// openFiles opens the server's data directory as its sandbox, owned by the
// system user so that the container's user can write to it.
func (m *Manager) openFiles(c Configuration) (*sandbox.FS, error) {
	cfg := m.deps.Config.Get()
	root := filepath.Join(cfg.System.Data, c.UUID)
	uid, gid := cfg.System.User.UID, cfg.System.User.GID
	files, err := sandbox.New(root, sandbox.Options{UID: uid, GID: gid, Denylist: c.Egg.FileDenylist, DiskLimit: c.Build.DiskLimitBytes()})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(root, 0o700); err != nil {
		return nil, err
	}
	if err := os.Lchown(root, uid, gid); err != nil && !os.IsPermission(err) {
		return nil, err
	}
	return files, nil
}

// remove unregisters a server.
func (m *Manager) remove(uuid string) {
	m.mu.Lock()
	delete(m.servers, uuid)
	m.mu.Unlock()
	m.stateMu.Lock()
	delete(m.states, uuid)
	m.stateMu.Unlock()
	m.saveStates()
	if m.deps.StatePush != nil {
		m.deps.StatePush.Forget(uuid)
	}
}

// LoadFromPanel fetches every server assigned to this node and registers
// them. A server whose definition cannot be decoded is logged and skipped.
func (m *Manager) LoadFromPanel(ctx context.Context, perPage int) error {
	raws, err := m.deps.Panel.AllServers(ctx, perPage, 4)
	if err != nil {
		return err
	}
	crash := m.deps.Config.Get().System.CrashDetection.Enabled
	for _, raw := range raws {
		def, err := ParseDefinition(raw.Settings, raw.ProcessConfiguration, crash)
		if err != nil {
			m.log.Error("skipping server with an invalid definition", "server", raw.UUID, "error", err)
			continue
		}
		if _, err := m.Add(def); err != nil {
			m.log.Error("skipping server", "server", def.Config.UUID, "error", err)
		}
	}
	m.log.Info("loaded servers from the backend", "count", len(m.All()))
	return nil
}

func (m *Manager) statesPath() string {
	return filepath.Join(m.deps.Config.Get().System.RootDirectory, "states.json")
}

// Restore brings every server back to where it was: a running container is
// re-attached (never restarted or re-created); a server that was running when
// the host went down is started again; everything else is offline.
//
// With an engine that lists its running containers in one call (issue 38),
// the running ones are re-attached in the background (restore.go) and
// Restore returns without waiting for them; otherwise each server's
// container is inspected before it returns.
func (m *Manager) Restore(ctx context.Context) {
	saved := m.savedStates()
	if running, ok := m.listRunning(ctx); ok {
		m.restoreListed(running, saved)
		m.saveStates()
		return
	}
	var g errgroup.Group
	g.SetLimit(4)
	for _, s := range m.All() {
		g.Go(func() error {
			m.restoreOne(ctx, s, saved[s.UUID()])
			return nil
		})
	}
	_ = g.Wait()
	m.saveStates()
}

func (m *Manager) restoreOne(ctx context.Context, s *Server, saved State) {
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := m.deps.Runtime.Inspect(ictx, s.UUID())
	switch {
	case err == nil && st.Running:
		if err := s.reattach(ictx, st); err != nil {
			s.log.Error("could not re-attach to the running container", "error", err)
		}
	case saved == Running || saved == Starting:
		s.log.Info("server was running before the daemon stopped; starting it")
		if err := s.PowerAsync(PowerStart, 0); err != nil {
			s.log.Warn("could not start the server", "error", err)
		}
	case err != nil && !errors.Is(err, runtime.ErrNotFound):
		s.log.Warn("could not inspect the container", "error", err)
	}
}

// reattach connects to a container that is already running.
func (s *Server) reattach(ctx context.Context, st runtime.State) error {
	n := consoleLines(s.deps.Config.Get())
	if lines, err := s.deps.Runtime.Logs(ctx, s.UUID(), n); err == nil {
		for _, l := range lines {
			s.console.add(l)
		}
	}
	if err := s.attach(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.startedAt = st.StartedAt
	s.mu.Unlock()
	s.watchStats()
	s.setState(Running)
	s.log.Info("re-attached to the running container")
	return nil
}

func (m *Manager) recordState(uuid string, from, to State) {
	m.stateMu.Lock()
	m.states[uuid] = to
	m.stateMu.Unlock()
	m.saveStates()
	if m.deps.StatePush != nil {
		m.deps.StatePush.Changed(uuid, string(from), string(to))
	}
}

// saveStates persists the states atomically.
func (m *Manager) saveStates() {
	m.stateMu.Lock()
	defer m.stateMu.Unlock()
	for _, s := range m.All() {
		if _, ok := m.states[s.UUID()]; !ok {
			m.states[s.UUID()] = s.State()
		}
	}
	data, err := json.Marshal(m.states)
	if err == nil {
		err = atomicfile.WriteFile(m.statesPath(), data, 0o600)
	}
	if err != nil {
		m.log.Warn("could not save server states", "error", err)
	}
}

// Create registers a new server from the backend's configuration, installs
// it in the background, and starts it afterwards when asked to.
func (m *Manager) Create(ctx context.Context, uuid string, startOnCompletion bool) (*Server, error) {
	if _, ok := m.Get(uuid); ok {
		return nil, ErrExists
	}
	res, err := m.deps.Panel.ServerConfiguration(ctx, uuid)
	if panel.IsNotFound(err) {
		return nil, ErrNotOnPanel
	}
	if err != nil {
		return nil, err
	}
	def, err := DefinitionFromPanel(res, m.deps.Config.Get().System.CrashDetection.Enabled)
	if err != nil {
		return nil, err
	}
	s, err := m.Add(def)
	if err != nil {
		return nil, err
	}
	// Claimed now, so that the server is seen installing as soon as it exists.
	job, err := s.BeginJob(s.ctx, JobInstall)
	if err != nil {
		return nil, err
	}
	if !s.goServer(func() {
		err := func() error {
			defer job.End()
			return s.install(job, false)
		}()
		if err == nil && startOnCompletion {
			if err := s.Power(s.ctx, PowerStart, 30*time.Second); err != nil {
				s.log.Warn("start after install failed", "error", err)
			}
		}
	}) {
		job.End()
	}
	return s, nil
}

// Delete removes a server in the spec's order: suspend, notify websocket
// clients, stop processes, cancel the jobs on its files and wait for them,
// remove from the manager, destroy the container, delete the files.
func (m *Manager) Delete(ctx context.Context, s *Server) error {
	s.mu.Lock()
	s.deleted = true
	s.def.Config.Suspended = true
	s.mu.Unlock()
	s.events.Publish(events.New(events.Deleted, "null"))
	s.CloseSessions("", CloseDeleted, "server deleted")

	uuid := s.UUID()
	// Kill cancels a power action in progress and waits for the exit.
	kctx, cancel := CleanupContext(ctx)
	err := s.Kill(kctx)
	cancel()
	if err != nil {
		s.log.Warn("killing the process before deletion failed", "error", err)
	}
	// The server's end ends the contexts of its jobs: the users' jobs and
	// backups stop, and are waited for before their tree is removed (an
	// exclusive job is not: an outgoing transfer holds the slot until here).
	s.cancel()
	wctx, cancel := CleanupContext(ctx)
	if err := s.jobs.waitShared(wctx); err != nil {
		s.log.Warn("jobs on the server's files did not end before its deletion", "error", err)
	}
	cancel()
	s.stopRun()
	m.remove(uuid)
	// The server is gone from the manager: its containers are removed even
	// if the caller gives up, within a bound of their own.
	rctx, cancelRemove := CleanupContext(ctx)
	defer cancelRemove()
	var errs []error
	for _, name := range []string{uuid, uuid + "_installer"} {
		if err := m.deps.removeContainer(rctx, s.log, name); err != nil {
			errs = append(errs, err)
		}
	}
	if m.deps.Quotas != nil {
		if err := m.deps.Quotas.Remove(s.DataDir()); err != nil {
			errs = append(errs, err)
		}
	}
	// Whole, as before: the removal is not cut by the caller or a bound.
	if err := s.removeFiles(context.WithoutCancel(ctx)); err != nil {
		errs = append(errs, err)
	}
	if err := removeMachineID(m.deps.Config.Get(), uuid); err != nil {
		errs = append(errs, err)
	}
	s.events.Close()
	return errors.Join(errs...)
}

// RemoveContainer removes a container of this node by name. A container
// that another node sharing the Docker engine created is not ours: it is
// left alone, with a warning, and that is not an error.
func (m *Manager) RemoveContainer(ctx context.Context, name string) error {
	return m.deps.removeContainer(ctx, m.log, name)
}

func (d *Deps) removeContainer(ctx context.Context, log *slog.Logger, name string) error {
	err := d.Runtime.Remove(ctx, name, d.Config.Get().UUID)
	var other *runtime.OtherNodeError
	if errors.As(err, &other) {
		log.Warn("leaving the container alone: it belongs to another node", "container", name, "node", other.Node)
		return nil
	}
	return err
}

// Close stops every server's goroutines at daemon shutdown. Containers keep
// running; they are re-attached at the next boot.
func (m *Manager) Close() {
	m.stopDiskMonitor()
	var wg sync.WaitGroup
	for _, s := range m.All() {
		wg.Go(s.close)
	}
	wg.Wait()
	m.saveStates()
}
