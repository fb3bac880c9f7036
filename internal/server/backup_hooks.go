package server

import (
	"context"
	"time"
)

// Hooks used by the backup package (additive only).

// Context lives as long as the server is managed by this daemon.
func (s *Server) Context() context.Context { return s.ctx }

// StopForRestore stops the process for a restore and waits up to wait for
// it to be offline. The caller has set the restoring flag, which refuses
// every power action of users; this stop bypasses it. It takes the power
// lock, so a power action already running finishes first.
func (s *Server) StopForRestore(ctx context.Context, wait time.Duration) error {
	if s.State() == Offline {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := s.acquire(ctx, wait); err != nil {
		return err
	}
	defer s.unlock()
	if err := s.stop(ctx); err != nil {
		return err
	}
	if s.State() != Offline {
		return ErrRunning
	}
	return nil
}

// DaemonMessage writes a line of the daemon's own into the console.
func (s *Server) DaemonMessage(text string) { s.daemonMessage(text) }
