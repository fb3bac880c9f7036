package transfer

import (
	"fmt"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/events"
)

// logLine formats a `transfer logs` message as the panels' consoles show it.
func logLine(now time.Time, text string) string {
	return "\x1b[33m\x1b[1m" + now.Format(time.RFC1123) + " [Transfer System] [Source Node]:\x1b[39m " + text + "\x1b[0m"
}

// progressBar renders "[=====>    ] 1.2 GiB / 3.4 GiB" (the total is the
// server's disk usage, which the archive may overtake when files grow).
func progressBar(done, total int64) string {
	const width = 25
	filled := 0
	if total > 0 {
		filled = int(min(done, total) * width / total)
	}
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	return fmt.Sprintf("[%s] %s / %s", bar, humanBytes(done), humanBytes(total))
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// transferLog publishes `transfer logs` messages.
type transferLog struct {
	publish func(events.Event)
	now     func() time.Time
}

func (l transferLog) msg(text string) {
	l.publish(events.New(events.TransferLogs, logLine(l.now(), text)))
}
