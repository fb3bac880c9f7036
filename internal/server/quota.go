package server

import "context"

// applyQuota sets the kernel project quota of the server's directory to its
// disk limit when system.quotas is on. A failure is logged and the server
// goes on as without quotas: the daemon's own checks still hold.
func (s *Server) applyQuota(ctx context.Context, limit int64) {
	if s.deps.Quotas == nil {
		return
	}
	if err := s.deps.Quotas.Apply(ctx, s.files, s.UUID(), limit); err != nil {
		s.log.Warn("could not set the kernel disk quota", "error", err)
	}
}
