package server

import (
	"context"

	"github.com/wharf/wharf/internal/usererr"
)

// ErrServerGone is the cause of a WorkContext ended because the server was
// deleted or the daemon stopped managing it.
var ErrServerGone = usererr.New(usererr.Conflict, "The server was deleted or its node is stopping: the operation was cancelled.")

// WorkContext returns a context for long work on the server's files done
// for a caller (compress, decompress, search, copy): it ends when ctx ends
// (the client went away), and when the server's own context ends (the
// server is deleted, or the daemon stops managing it), so that no such
// work outlives either. cancel releases it and must be called.
func (s *Server) WorkContext(ctx context.Context) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.ctx, func() { cancel(ErrServerGone) })
	return wctx, func() {
		stop()
		cancel(context.Canceled)
	}
}
