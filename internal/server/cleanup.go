package server

import (
	"context"
	"time"
)

// CleanupTimeout bounds a clean-up call that must run even though the context of the work it
// cleans up after has ended (a container removal after a failed start or install, the removal
// of a half-received server, the disk usage walk after a restore). Such calls detach from that
// context, and without a bound of their own a hung Docker engine or disk would stall them, and
// the daemon's shutdown that waits for them, forever. A healthy engine removes a container in
// well under a second; a minute leaves room for a loaded host.
const CleanupTimeout = time.Minute

// CleanupContext returns a context for a clean-up call: it keeps ctx's values, is not
// cancelled with ctx, and ends after CleanupTimeout.
func CleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
}
