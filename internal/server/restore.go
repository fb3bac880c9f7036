package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/wharf/wharf/internal/runtime"
)

// Issue 38 §1: the boot answers requests before the running containers are
// re-attached. One list call says which servers' containers run; each of
// those is marked running at once (the API serves it so) and re-attached
// in the background, at most restoreConcurrency at a time, while it holds
// its power lock: a power action waits for the re-attach, as a command does.

// restoreConcurrency bounds the re-attaches in flight at boot.
const restoreConcurrency = 4

// restoreWait bounds one re-attach at boot, and so how long a power action
// or a command sent during it waits for it.
const restoreWait = 30 * time.Second

// savedStates reads the states the previous run persisted.
func (m *Manager) savedStates() map[string]State {
	saved := map[string]State{}
	if data, err := os.ReadFile(m.statesPath()); err == nil {
		if err := json.Unmarshal(data, &saved); err != nil {
			m.log.Warn("ignoring an unreadable states file", "error", err)
		}
	}
	return saved
}

// listRunning asks the engine once for its running containers; an engine
// without the call (or a failed call) gives ok false.
func (m *Manager) listRunning(ctx context.Context) (map[string]bool, bool) {
	l, ok := m.deps.Runtime.(runtime.RunningLister)
	if !ok {
		return nil, false
	}
	lctx, cancel := context.WithTimeout(ctx, restoreWait)
	defer cancel()
	running, err := l.ListRunning(lctx)
	if err != nil {
		if !errors.Is(err, errors.ErrUnsupported) {
			m.log.Warn("could not list the running containers; inspecting each server's", "error", err)
		}
		return nil, false
	}
	return running, true
}

// restoreListed restores every server from the engine's list of running
// containers: the running ones are re-attached in the background, the ones
// that were running before the daemon stopped (and are not now) are started.
func (m *Manager) restoreListed(running map[string]bool, saved map[string]State) {
	sem := make(chan struct{}, restoreConcurrency)
	for _, s := range m.All() {
		was := saved[s.UUID()]
		switch {
		case running[s.UUID()]:
			s.beginReattach(sem, was)
		case was == Running || was == Starting:
			s.startAfterBoot()
		}
	}
}

// startAfterBoot starts a server that was running when the daemon (or the
// host) went down.
func (s *Server) startAfterBoot() {
	s.log.Info("server was running before the daemon stopped; starting it")
	if err := s.PowerAsync(PowerStart, 0); err != nil {
		s.log.Warn("could not start the server", "error", err)
	}
}

// beginReattach marks the server running (the engine listed its container
// running) and re-attaches it in the background under its power lock,
// after a free slot of sem.
func (s *Server) beginReattach(sem chan struct{}, saved State) {
	hctx, release, ok := s.power.tryAcquire(s.ctx)
	if !ok { // nothing else runs at boot; never the case
		return
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.state = Running // published (and pushed) once attached
	s.restoring = done
	s.mu.Unlock()
	finish := func() {
		release()
		close(done)
	}
	if !s.goServer(func() {
		defer finish()
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
		case <-hctx.Done():
			return
		}
		s.finishReattach(hctx, saved)
	}) {
		finish()
	}
}

// finishReattach re-attaches the listed container. When it no longer runs
// the server goes offline (and starts again if it was running before the
// daemon stopped, as at any boot). A cancelled ctx (a kill, the node's
// shutdown) changes nothing: the kill settles the state itself.
func (s *Server) finishReattach(hctx context.Context, saved State) {
	ctx, cancel := context.WithTimeout(hctx, restoreWait)
	defer cancel()
	st, err := s.deps.Runtime.Inspect(ctx, s.UUID())
	if err == nil && st.Running {
		if err = s.reattach(ctx, st); err == nil {
			if s.onState != nil {
				s.onState(s.UUID(), Offline, Running)
			}
			return
		}
		s.log.Error("could not re-attach to the running container", "error", err)
	} else if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		s.log.Warn("could not inspect the container", "error", err)
	}
	if hctx.Err() != nil {
		return
	}
	s.setState(Offline)
	if err == nil && !st.Running && (saved == Running || saved == Starting) {
		s.startAfterBoot() // waits for this re-attach's power lock
	}
}

// restorePending returns the channel closed when the server's re-attach at
// boot is over, nil when none is under way.
func (s *Server) restorePending() <-chan struct{} {
	s.mu.RLock()
	done := s.restoring
	s.mu.RUnlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
		return done
	}
}

// waitRestored waits for the server's re-attach at boot, if one is under
// way, for at most restoreWait.
func (s *Server) waitRestored() {
	done := s.restorePending()
	if done == nil {
		return
	}
	t := time.NewTimer(restoreWait)
	defer t.Stop()
	select {
	case <-done:
	case <-s.ctx.Done():
	case <-t.C:
	}
}
