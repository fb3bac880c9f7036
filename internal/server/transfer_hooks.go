package server

import (
	"context"
	"fmt"
	"time"
)

// Hooks for internal/transfer: the transfer package sets and clears the
// transferring flag itself (SetTransferring); these are the few actions it
// needs that the power lock and the flags would otherwise refuse.

// StopForTransfer stops a running server for an outgoing transfer, which
// has already set the transferring flag (so Power(stop) would be refused).
// It takes the power lock (waiting at most wait for it), sends the
// configured stop and waits at most wait for the server to be offline; a
// server that is still running then is an error, and the stop keeps going.
func (s *Server) StopForTransfer(ctx context.Context, wait time.Duration) error {
	if s.State() == Offline {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := s.acquire(ctx, wait); err != nil {
		return fmt.Errorf("waiting for the power lock: %w", err)
	}
	defer s.unlock()
	if s.State() == Offline {
		return nil
	}
	s.expectedExit.Store(true)
	s.setState(Stopping)
	def := s.Definition()
	switch def.Process.Stop.Type {
	case "command":
		if err := s.SendCommand(def.Process.Stop.Value); err != nil {
			_ = s.deps.Runtime.Stop(ctx, def.Config.UUID, wait)
		}
	case "signal":
		_ = s.deps.Runtime.Signal(ctx, def.Config.UUID, DockerSignal(def.Process.Stop.Value))
	default:
		_ = s.deps.Runtime.Stop(ctx, def.Config.UUID, wait)
	}
	if !s.waitForState(ctx, Offline, wait) {
		return fmt.Errorf("the server did not stop within %s", wait)
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
