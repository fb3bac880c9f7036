package server

import (
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/runtime/runtimetest"
)

// Issue 38 §1: the lines of one read are published together, in order; a
// line the throttle dropped passes when it is the last of its read (the
// newest line of a flood, such as a command's answer after it, is never
// lost), and only then.
func TestOutputBatchLastLineOfReadPassesThrottle(t *testing.T) {
	_, s := newFakeEnv(t, runtimetest.Process{}, func(c *config.Config, _ *Deps) {
		c.Throttles = config.Throttles{Enabled: true, Lines: 2, LineResetInterval: 3_600_000}
	})
	sub := s.Events().Subscribe(100)
	defer sub.Close()
	var out outputBatch
	read := func(lines ...string) {
		for _, l := range lines {
			s.onOutput(l, &out)
		}
		s.endOfRead(&out)
	}
	read("a", "b", "c", "d")
	read("e", "f")
	var got []string
	for len(sub.C) > 0 {
		e := <-sub.C
		if e.Name != events.ConsoleOutput {
			continue
		}
		l := e.Args[0]
		if strings.Contains(l, "too quickly") {
			l = "notice"
		}
		got = append(got, l)
	}
	if want := "a b notice d f"; strings.Join(got, " ") != want {
		t.Fatalf("published %q, want %q", strings.Join(got, " "), want)
	}
	if lines := s.ConsoleLines(10); strings.Join(lines[len(lines)-2:], " ") != "d f" {
		t.Fatalf("console ring ends with %q", lines)
	}
}
