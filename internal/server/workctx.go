package server

import (
	"context"

	"github.com/wharf/wharf/internal/usererr"
)

// ErrServerGone is the cause of a job's context or a WorkContext ended
// because the server was deleted or the daemon stopped managing it.
var ErrServerGone = usererr.New(usererr.Conflict, "The server was deleted or its node is stopping: the operation was cancelled.")

// WorkContext returns a context for long work on the server's files done
// for a caller without a job (a search, a listing): it ends when ctx ends
// (the client went away), when any of also ends (the node beginning to
// stop), and when the server's own context ends (the server is deleted, or
// the daemon stops managing it), so that no such work outlives any of
// them. cancel releases it and must be called. (A change to the files
// takes a job: BeginJob.)
func (s *Server) WorkContext(ctx context.Context, also ...context.Context) (context.Context, context.CancelFunc) {
	return s.lifetime(ctx, also)
}
