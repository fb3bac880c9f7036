package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/runtime"
)

// Sync refreshes the configuration from the backend: limits are applied to a
// running container at once; a suspension stops the server and closes all of
// its sessions.
func (s *Server) Sync(ctx context.Context) error {
	uuid := s.UUID()
	res, err := s.deps.Panel.ServerConfiguration(ctx, uuid)
	if panel.IsNotFound(err) {
		return ErrNotOnPanel
	}
	if err != nil {
		return err
	}
	def, err := DefinitionFromPanel(res, s.deps.Config.Get().System.CrashDetection.Enabled)
	if err != nil {
		return err
	}
	if def.Config.UUID != uuid {
		return fmt.Errorf("server: the backend answered with the configuration of %s", def.Config.UUID)
	}
	s.apply(def)
	s.applyQuota(ctx, def.Config.Build.DiskLimitBytes())

	if s.State() != Offline {
		limits := ContainerLimits(def.Config.Build, s.deps.Config.Get().Docker)
		err := s.deps.Runtime.Update(ctx, uuid, limits)
		switch {
		case errors.Is(err, runtime.ErrLiveUpdateUnsupported):
			// Podman 4: the container is created anew at each start.
			s.log.Warn("the engine cannot change a running container's limits: the new limits apply at the next start", "error", err)
			s.daemonMessage("The new resource limits apply when the server next starts (the container engine cannot change them while it runs).")
		case err != nil && !errors.Is(err, runtime.ErrNotFound):
			s.log.Warn("could not apply new limits to the running container", "error", err)
		}
	}
	if def.Config.Suspended {
		s.CloseSessions("", CloseSuspended, "server is suspended")
		if s.State() != Offline {
			s.goServer(func() {
				if err := s.Power(s.ctx, PowerStop, time.Minute); err != nil && !errors.Is(err, context.Canceled) {
					s.log.Warn("stopping the suspended server failed; killing it", "error", err)
					_ = s.Kill(s.ctx)
				}
			})
		}
	}
	return nil
}

// apply installs a new definition.
func (s *Server) apply(def Definition) {
	s.mu.Lock()
	s.def = def
	s.done = compileDone(def.Process, s.log)
	s.features = NewFeatureMatcher(def.Config.Egg.Features, def.Process.Startup.StripANSI)
	if s.state == Offline {
		s.util.MemoryLimitBytes = uint64(max(0, def.Config.Build.MemoryLimit)) * mib
	}
	s.mu.Unlock()
	s.files.SetDiskLimit(def.Config.Build.DiskLimitBytes())
	s.files.SetDenylist(def.Config.Egg.FileDenylist)
}
