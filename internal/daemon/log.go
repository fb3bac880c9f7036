package daemon

import (
	"io"
	"log/slog"
)

// newLogHandler returns the daemon's log handler: JSON lines for log
// collectors with format "json", logfmt-style text otherwise. The log goes
// to one stream (stderr under systemd, hence the journal); see
// docs/operations.md for why there is no log file of our own.
func newLogHandler(w io.Writer, format string, level slog.Leveler) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}
