package server

import (
	"context"
	"fmt"
	"time"
)

// Hooks for the jobs that own a server for a while (backup restores and
// transfers). They set their own flag (SetRestoring, SetTransferring), which
// refuses every power action of users; these are the few actions they need
// that the flags would otherwise refuse.

// Context lives as long as the server is managed by this daemon.
func (s *Server) Context() context.Context { return s.ctx }

// StopForJob stops a running server for a restore or a transfer. It takes
// the power lock (so a power action already running finishes first), sends
// the configured stop and waits at most wait for the server to be offline.
// A server still running then is an error; the stop is not escalated.
func (s *Server) StopForJob(ctx context.Context, wait time.Duration) error {
	if s.State() == Offline {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := s.acquire(ctx, wait); err != nil {
		return fmt.Errorf("waiting for the power lock: %w", err)
	}
	defer s.unlock()
	if err := s.stop(ctx); err != nil {
		return fmt.Errorf("the server did not stop within %s: %w", wait, err)
	}
	if s.State() != Offline {
		return fmt.Errorf("the server did not stop within %s: %w", wait, ErrRunning)
	}
	return nil
}

// CreateContainer creates (never starts) the server's container from its
// current configuration, pulling the image when needed: what a target node
// does once a transferred server's files have arrived.
func (s *Server) CreateContainer(ctx context.Context) error {
	def := s.Definition()
	spec, refused := ServerContainerSpec(def.Config, s.deps.Config.Get(), s.DataDir())
	for _, m := range refused {
		s.log.Warn("refused a mount outside allowed_mounts", "source", m)
	}
	if err := s.ensureImage(ctx, def.Config.Container.Image); err != nil {
		return err
	}
	return s.deps.Runtime.Create(ctx, spec)
}

// DaemonMessage writes a line of the daemon's own into the server's
// console (what a job tells the users watching it).
func (s *Server) DaemonMessage(text string) { s.daemonMessage(text) }
