package server

import (
	"context"
	"fmt"
	"time"
)

// Hooks for the jobs that own a server for a while (backup restores and
// transfers). They hold the job slot (BeginJob), which refuses every power
// action of users but kill; these are the few actions they need that the
// slot would otherwise refuse.

// Context lives as long as the server is managed by this daemon.
func (s *Server) Context() context.Context { return s.ctx }

// StopForJob stops a running server for a restore or a transfer. It takes
// the power lock (so a power action already running finishes first), sends
// the configured stop and waits at most wait for the server to be offline.
// A server still running then is an error; the stop is not escalated. A
// kill during the wait is no error: it brings the server offline too.
func (s *Server) StopForJob(ctx context.Context, wait time.Duration) error {
	if s.State() == Offline {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := s.stopLocked(ctx, wait); err != nil {
		return fmt.Errorf("the server did not stop within %s: %w", wait, err)
	}
	return nil
}

// stopLocked stops the server through the power lock, like any stop: it
// waits up to lockWait for the lock, then stops with the configured method
// (escalating to a kill after the stop timeout, unless ctx ends first). A
// kill that cancels the stop is waited for: it brings the server offline.
func (s *Server) stopLocked(ctx context.Context, lockWait time.Duration) error {
	hctx, release, err := s.power.acquire(ctx, lockWait)
	if err != nil {
		return fmt.Errorf("waiting for the power lock: %w", err)
	}
	err = s.stop(hctx)
	// Released before waiting for the kill: the kill waits for the lock
	// to be free before it kills.
	release()
	if err != nil && !killed(hctx) {
		return err
	}
	if !s.waitForState(ctx, Offline, killWait) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return ErrRunning
	}
	return nil
}

// CreateContainer creates (never starts) the server's container from its
// current configuration, pulling the image when needed: what a target node
// does once a transferred server's files have arrived.
func (s *Server) CreateContainer(ctx context.Context) error {
	def := s.Definition()
	node := s.deps.Config.Get()
	spec, refused := ServerContainerSpec(def.Config, node, s.DataDir())
	for _, m := range refused {
		s.log.Warn("refused a mount outside allowed_mounts or over a system file", "source", m)
	}
	if err := s.ensureImage(ctx, def.Config.Container.Image); err != nil {
		return err
	}
	if err := s.prepareContainer(ctx, def.Config, node, &spec); err != nil {
		return err
	}
	return s.deps.Runtime.Create(ctx, spec)
}

// DaemonMessage writes a line of the daemon's own into the server's
// console (what a job tells the users watching it).
func (s *Server) DaemonMessage(text string) { s.daemonMessage(text) }
