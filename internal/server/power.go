package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/usererr"
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
// start, stop and restart are refused while an exclusive job (install,
// reinstall, restore, transfer) holds the job slot; start and restart while
// suspended. Kill is always allowed.
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
	if err := s.RunningJob().refusesPower(a); err != nil {
		return err
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
		if !s.goServer(func() { s.report(a, s.Kill(s.ctx), false) }) {
			return ErrDeleted
		}
		return nil
	}
	if wait <= 0 && s.restorePending() != nil {
		// The re-attach at boot holds the lock: the action waits for it.
		if !s.goServer(func() { s.report(a, s.Power(s.ctx, a, restoreWait), false) }) {
			return ErrDeleted
		}
		return nil
	}
	if wait <= 0 {
		ctx, release, ok := s.power.tryAcquire(s.ctx)
		if !ok {
			return ErrLocked
		}
		if !s.goServer(func() {
			defer release()
			s.report(a, s.runLocked(ctx, a), false)
		}) {
			release()
			return ErrDeleted
		}
		return nil
	}
	if !s.goServer(func() { s.report(a, s.Power(s.ctx, a, wait), true) }) {
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
	ctx, release, err := s.power.acquire(ctx, wait)
	if err != nil {
		return err
	}
	defer release()
	return s.runLocked(ctx, a)
}

// runLocked runs an action while holding the power lock; ctx is the
// holder's, which a kill cancels.
func (s *Server) runLocked(ctx context.Context, a PowerAction) error {
	// A job may have begun while the action waited for the lock.
	if err := s.CheckPower(a); err != nil {
		return err
	}
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

// report logs a background action's failure and says on the console why it
// did not happen. A start that finds the server running is only reported
// when it was queued (the caller could not see the state it would meet); a
// cancelled action was ended by a kill or the daemon's shutdown.
func (s *Server) report(a PowerAction, err error, queued bool) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	if errors.Is(err, ErrRunning) && !queued {
		s.log.Debug("power action not needed", "action", a, "error", err)
		return
	}
	s.log.Warn("power action failed", "action", a, "error", err)
	if notRun(err) {
		why := err.Error()
		if ue, ok := usererr.From(err); ok {
			why = ue.Message
		}
		s.daemonMessage("Power action " + string(a) + " was not run: " + strings.TrimSuffix(why, ".") + ".")
		return
	}
	s.daemonMessage("Power action " + string(a) + " failed: " + err.Error())
}

// notRun reports whether err refused an action before it changed anything.
func notRun(err error) bool {
	for _, e := range []error{ErrRunning, ErrLocked, ErrLockTimeout, ErrInstalling, ErrTransferring, ErrRestoring, ErrSuspended, ErrDeleted} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

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
		if err != nil && ctx.Err() != nil {
			return err
		}
		// Any other error is a directory the count could not read: the
		// usage then counts as over the limit (checked just below).
		if err != nil {
			s.log.Warn("disk usage walk failed", "error", err)
		}
		s.markDiskWalked(s.deps.now())
		if limit < 0 || used > limit {
			s.daemonMessage("Server is out of disk space: it cannot be started.")
			return ErrDiskSpace
		}
	}
	if err := s.checkEntries(ctx); err != nil {
		return err
	}
	if err := s.prepareFiles(ctx, def); err != nil {
		return err
	}
	s.expectedExit.Store(false)
	s.throttle.reset()
	if !s.setState(Starting) {
		return ErrRunning
	}
	if err := s.startContainer(ctx, def); err != nil {
		if s.ctx.Err() != nil {
			// The daemon is shutting down (or the server is being
			// deleted, which removes its container): containers outlive
			// the daemon, also one whose start the engine had not
			// confirmed yet (the game may already run: its done line can
			// come before the engine's answer). The state stays as it
			// is; the next boot re-attaches a container that runs and
			// starts one that does not, as for any server saved starting.
			return err
		}
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

// checkEntries refuses to start a server whose directory holds more
// entries than system.disk_entry_limit: the disk monitor would stop it at
// its first check.
func (s *Server) checkEntries(ctx context.Context) error {
	most := s.deps.Config.Get().System.DiskEntryLimit
	if most <= 0 {
		return nil
	}
	n, err := s.files.CountEntries(ctx)
	if err != nil && ctx.Err() != nil {
		return err
	}
	if err != nil {
		s.log.Warn("counting the server's entries failed", "error", err)
	}
	if n > most {
		s.daemonMessage(fmt.Sprintf("Server holds %d files and directories, more than this node allows (%d): it cannot be started.", n, most))
		return ErrDiskSpace
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
		s.log.Warn("refused a mount outside allowed_mounts or over a system file", "source", m)
		s.daemonMessage("A mount was refused (its source is not in allowed_mounts, or it covers /etc/passwd, /etc/group or /etc/machine-id): " + m)
	}
	if err := s.ensureImage(ctx, def.Config.Container.Image); err != nil {
		return err
	}
	if err := s.prepareContainer(ctx, def.Config, cfg, &spec); err != nil {
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
func (s *Server) stop(ctx context.Context) error { return s.stopWithin(ctx, s.stopTimeout()) }

// stopWithin is stop with the time the process is given before the kill.
func (s *Server) stopWithin(ctx context.Context, timeout time.Duration) error {
	if s.State() == Offline {
		return nil
	}
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
// cancelled: they run once the kill has brought the server offline.
func (s *Server) Kill(ctx context.Context) error {
	end, unwound, err := s.power.beginKill(ctx, killWait)
	if err != nil {
		return err
	}
	defer end()
	if !unwound {
		s.log.Warn("the running power action did not unwind in time; killing anyway")
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
	// During the re-attach at boot no process is attached yet and no exit
	// will be reported: settle at once. Otherwise the run's end reports the
	// exit (onStreamEnd, which may still wait for the engine after the
	// stream closed): wait for it, or a start right after the kill would be
	// taken for the old process's crash.
	reattaching := s.restorePending() != nil
	s.mu.RLock()
	reattaching = reattaching && s.run == nil
	s.mu.RUnlock()
	if err == nil && (reattaching || !s.waitForState(ctx, Offline, killWait)) && s.State() != Offline {
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
