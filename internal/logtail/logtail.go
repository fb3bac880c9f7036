// Package logtail keeps the daemon's most recent log lines in memory, so that
// the diagnostics report can include them however the daemon was started (a
// systemd unit of any name, a container, another supervisor): the journal is
// only one of those places.
package logtail

import (
	"bytes"
	"io"
	"sync"
)

// Bounds of what a Tail holds: lines beyond MaxLines push out the oldest, and
// a line longer than MaxLineBytes is cut (a log line that long is a bug or an
// echo of hostile input; its start is what a reader needs).
const (
	MaxLines     = 500
	MaxLineBytes = 4096
)

// Tail is an io.Writer that passes everything on to the writer it wraps and
// keeps copies of the last MaxLines lines. It is safe for concurrent use:
// writes reach out one at a time, in the order they are kept.
type Tail struct {
	out io.Writer

	mu      sync.Mutex
	lines   [MaxLines][]byte
	next    int // where the next line goes
	count   int // lines held, up to MaxLines
	partial []byte
}

// New returns a Tail that writes through to out.
func New(out io.Writer) *Tail { return &Tail{out: out} }

// Write passes p on and records its complete lines. A slog handler writes
// one whole record per call; a write without a final newline is kept until
// the rest of its line arrives.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.out.Write(p)
	rest := p[:n]
	for len(rest) > 0 {
		line, after, found := bytes.Cut(rest, []byte{'\n'})
		if !found {
			t.partial = appendCapped(t.partial, line)
			break
		}
		t.keep(appendCapped(t.partial, line))
		t.partial = nil
		rest = after
	}
	return n, err
}

// appendCapped appends what fits of b within MaxLineBytes.
func appendCapped(dst, b []byte) []byte {
	if room := MaxLineBytes - len(dst); len(b) > room {
		b = b[:max(room, 0)]
	}
	return append(dst, b...)
}

func (t *Tail) keep(line []byte) {
	t.lines[t.next] = bytes.Clone(line)
	t.next = (t.next + 1) % MaxLines
	t.count = min(t.count+1, MaxLines)
}

// Last returns the last n complete lines, oldest first (all of them when
// fewer are held).
func (t *Tail) Last(n int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	n = min(max(n, 0), t.count)
	out := make([]string, 0, n)
	for i := t.next - n; i < t.next; i++ {
		out = append(out, string(t.lines[(i+MaxLines)%MaxLines]))
	}
	return out
}
