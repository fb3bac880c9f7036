package server

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/runtime"
)

// PowerAction is one of start, stop, restart, kill.
type PowerAction string

// The power actions.
const (
	PowerStart   PowerAction = "start"
	PowerStop    PowerAction = "stop"
	PowerRestart PowerAction = "restart"
	PowerKill    PowerAction = "kill"
)

// DefaultStopTimeout is how long a stop may take before it escalates to a
// kill (Deps.StopTimeout overrides it).
const DefaultStopTimeout = 10 * time.Minute

// killWait bounds how long a kill waits for the process to be reported gone
// (and for a cancelled action to unwind) before it settles the state itself.
const killWait = 30 * time.Second

// ParsePowerAction validates an action name.
func ParsePowerAction(s string) (PowerAction, error) {
	switch a := PowerAction(s); a {
	case PowerStart, PowerStop, PowerRestart, PowerKill:
		return a, nil
	}
	return "", ErrBadAction
}

// CheckPower reports whether the action may run now, before taking the lock:
// start, stop and restart are refused while installing, transferring or
// restoring; start and restart while suspended. Kill is always allowed.
func (s *Server) CheckPower(a PowerAction) error {
	s.mu.RLock()
	deleted, suspended := s.deleted, s.def.Config.Suspended
	s.mu.RUnlock()
	if deleted {
		return ErrDeleted
	}
	if a == PowerKill {
		return nil
	}
	switch {
	case s.restoring.Load():
		return ErrRestoring
	case s.transferring.Load():
		return ErrTransferring
	case s.installing.Load():
		return ErrInstalling
	}
	if suspended && (a == PowerStart || a == PowerRestart) {
		return ErrSuspended
	}
	return nil
}

// PowerAsync checks the action, then runs it in the background, waiting up to
// wait for the power lock. With wait 0 a busy lock is reported at once
// (ErrLocked). Kill never waits for the lock. The outcome is reported on the
// console and in the log.
func (s *Server) PowerAsync(a PowerAction, wait time.Duration) error {
	if err := s.CheckPower(a); err != nil {
		return err
	}
	if a == PowerKill {
		if !s.goServer(func() { s.report(a, s.Kill(s.ctx)) }) {
			return ErrDeleted
		}
		return nil
	}
	if wait <= 0 {
		if !s.tryLock() {
			return ErrLocked
		}
		if !s.goServer(func() {
			defer s.unlock()
			s.report(a, s.runLocked(s.ctx, a))
		}) {
			s.unlock()
			return ErrDeleted
		}
		return nil
	}
	if !s.goServer(func() { s.report(a, s.Power(s.ctx, a, wait)) }) {
		return ErrDeleted
	}
	return nil
}

// Power runs the action synchronously, waiting up to wait for the power lock.
func (s *Server) Power(ctx context.Context, a PowerAction, wait time.Duration) error {
	if err := s.CheckPower(a); err != nil {
		return err
	}
	if a == PowerKill {
		return s.Kill(ctx)
	}
	if err := s.acquire(ctx, wait); err != nil {
		return err
	}
	defer s.unlock()
	return s.runLocked(ctx, a)
}

// runLocked runs an action while holding the power lock. The action's
// context is cancelled by a kill, which always wins.
func (s *Server) runLocked(ctx context.Context, a PowerAction) error {
	// The flags may have changed while waiting for the lock.
	if err := s.CheckPower(a); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.actionMu.Lock()
	s.action = &runningAction{cancel: cancel, done: done}
	s.actionMu.Unlock()
	defer func() {
		s.actionMu.Lock()
		s.action = nil
		s.actionMu.Unlock()
		cancel()
		close(done)
	}()
	switch a {
	case PowerStart:
		return s.start(ctx)
	case PowerStop:
		return s.stop(ctx)
	case PowerRestart:
		if err := s.stop(ctx); err != nil {
			return err
		}
		return s.start(ctx)
	}
	return ErrBadAction
}

func (s *Server) report(a PowerAction, err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	s.log.Warn("power action failed", "action", a, "error", err)
	if !errors.Is(err, ErrRunning) {
		s.daemonMessage("Power action " + string(a) + " failed: " + err.Error())
	}
}

func (s *Server) tryLock() bool {
	select {
	case s.lock <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s *Server) acquire(ctx context.Context, wait time.Duration) error {
	if s.tryLock() {
		return nil
	}
	if wait <= 0 {
		return ErrLocked
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s.lock <- struct{}{}:
		return nil
	case <-t.C:
		return ErrLockTimeout
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Server) unlock() { <-s.lock }

// start runs the pre-start sequence of the spec, in order, then creates and
// starts a fresh container. Any failure leaves the server offline.
func (s *Server) start(ctx context.Context) error {
	if s.State() != Offline {
		return ErrRunning
	}
	if err := s.Sync(ctx); err != nil {
		return err
	}
	def := s.Definition()
	if def.Config.Suspended {
		return ErrSuspended
	}
	if limit := def.Config.Build.DiskLimitBytes(); limit != 0 {
		s.daemonMessage("Checking server disk space usage, this could take a few seconds...")
		used, err := s.files.RefreshUsage(ctx)
		if err != nil {
			return err
		}
		if limit < 0 || used > limit {
			s.daemonMessage("Server is out of disk space: it cannot be started.")
			return ErrDiskSpace
		}
	}
	s.updateConfigurationFiles(ctx, def)
	if s.deps.Config.Get().System.CheckPermissionsOnBoot {
		if err := s.fixOwnership(ctx); err != nil {
			return err
		}
	}
	s.expectedExit.Store(false)
	s.throttle.reset()
	if !s.setState(Starting) {
		return ErrRunning
	}
	if err := s.startContainer(ctx, def); err != nil {
		s.expectedExit.Store(true)
		s.detach()
		// The engine may have started the container although the call
		// failed (a kill cancelled it mid-way): make sure it is not left
		// running, unless the name is another node's container.
		var other *runtime.OtherNodeError
		if !errors.As(err, &other) {
			cctx, cancel := CleanupContext(ctx)
			_ = s.deps.Runtime.Signal(cctx, def.Config.UUID, "SIGKILL")
			cancel()
		}
		s.setState(Offline)
		return err
	}
	return nil
}

// startContainer creates the container from the fresh configuration,
// attaches to it (before starting, so the first line is seen) and starts it.
func (s *Server) startContainer(ctx context.Context, def Definition) error {
	rt := s.deps.Runtime
	cfg := s.deps.Config.Get()
	spec, refused := ServerContainerSpec(def.Config, cfg, s.DataDir())
	for _, m := range refused {
		s.log.Warn("refused a mount outside allowed_mounts", "source", m)
		s.daemonMessage("A mount was refused because its source is not in allowed_mounts: " + m)
	}
	if err := s.ensureImage(ctx, def.Config.Container.Image); err != nil {
		return err
	}
	if err := rt.Create(ctx, spec); err != nil {
		return err
	}
	if err := s.attach(ctx); err != nil {
		return err
	}
	if err := rt.Start(ctx, spec.Name); err != nil {
		return err
	}
	if st, err := rt.Inspect(ctx, spec.Name); err == nil {
		s.mu.Lock()
		s.startedAt = st.StartedAt
		s.mu.Unlock()
	}
	s.watchStats()
	return nil
}

func (s *Server) ensureImage(ctx context.Context, image string) error {
	if strings.HasPrefix(image, "~") {
		return s.deps.Runtime.EnsureImage(ctx, image, nil, nil)
	}
	s.daemonMessage("Pulling Docker container image, this could take a few minutes to complete...")
	err := s.deps.Runtime.EnsureImage(ctx, image, s.registryAuth(image), func(line string) {
		s.log.Debug("image pull", "progress", line)
	})
	if err == nil {
		s.daemonMessage("Finished pulling Docker container image")
	}
	return err
}

func (s *Server) stopTimeout() time.Duration {
	if s.deps.StopTimeout > 0 {
		return s.deps.StopTimeout
	}
	return DefaultStopTimeout
}

// stop stops the process with its configured stop method (a console
// command, a signal, or the engine's stop) and waits for it to exit; when it
// has not exited after the stop timeout, it is killed.
func (s *Server) stop(ctx context.Context) error {
	if s.State() == Offline {
		return nil
	}
	timeout := s.stopTimeout()
	deadline := time.Now().Add(timeout)
	s.expectedExit.Store(true)
	s.setState(Stopping)
	def := s.Definition()
	rt, name := s.deps.Runtime, def.Config.UUID
	var err error
	switch def.Process.Stop.Type {
	case "command":
		err = s.SendCommand(def.Process.Stop.Value)
		if err != nil {
			err = rt.Stop(ctx, name, timeout)
		}
	case "signal":
		err = rt.Signal(ctx, name, DockerSignal(def.Process.Stop.Value))
	default: // "stop", and anything the panel may send that we do not know
		err = rt.Stop(ctx, name, timeout)
	}
	if err != nil && !errors.Is(err, runtime.ErrNotFound) && !errors.Is(err, runtime.ErrNotRunning) && ctx.Err() == nil {
		s.log.Warn("stop failed; waiting for the stop timeout before killing", "error", err)
	}
	if s.waitForState(ctx, Offline, time.Until(deadline)) {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	s.daemonMessage("The server did not stop in time: killing it.")
	return s.kill(ctx)
}

// Kill sends SIGKILL. It takes no lock, is never refused by the flags and
// always wins: the action holding the lock (a start in progress, the stop of
// a restart) is cancelled first. Actions waiting for the lock are not
// cancelled.
func (s *Server) Kill(ctx context.Context) error {
	s.actionMu.Lock()
	act := s.action
	s.actionMu.Unlock()
	if act != nil {
		act.cancel()
		t := time.NewTimer(killWait)
		select {
		case <-act.done:
		case <-t.C:
			s.log.Warn("the running power action did not unwind in time; killing anyway")
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
	return s.kill(ctx)
}

// kill sends SIGKILL and waits for the exit to be reported.
func (s *Server) kill(ctx context.Context) error {
	if s.State() == Offline {
		return nil
	}
	s.expectedExit.Store(true)
	s.setState(Stopping)
	err := s.deps.Runtime.Signal(ctx, s.UUID(), "SIGKILL")
	if errors.Is(err, runtime.ErrNotFound) || errors.Is(err, runtime.ErrNotRunning) {
		err = nil
	}
	if err == nil && !s.waitForState(ctx, Offline, killWait) && s.State() != Offline {
		// No attached process reported the exit: settle the state ourselves.
		s.detach()
		s.setState(Offline)
	}
	return err
}

// DockerSignal maps a stop signal value to a valid Docker signal name.
// Unknown values become SIGKILL, as the panels expect.
func DockerSignal(v string) string {
	v = strings.ToUpper(strings.TrimSpace(v))
	v = strings.TrimPrefix(v, "SIG")
	switch v {
	case "C", "INT":
		return "SIGINT"
	case "TERM":
		return "SIGTERM"
	case "ABRT":
		return "SIGABRT"
	case "HUP":
		return "SIGHUP"
	case "QUIT":
		return "SIGQUIT"
	case "USR1":
		return "SIGUSR1"
	case "USR2":
		return "SIGUSR2"
	}
	return "SIGKILL"
}
