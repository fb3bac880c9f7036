package e2e

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
)

// skippedRE matches the marker of skipped console lines (the daemon's own
// line, its colours around it).
var skippedRE = regexp.MustCompile(`(\d+) lines skipped: this console could not keep up`)

// Issue 38 §1: a client that cannot keep up with a flood gets a recent
// window of the console behind an "N lines skipped" line: the newest lines
// reach it. The lagging client does not read while the game prints 200,000
// numbered lines (its socket's buffers and its queue fill); once a reading
// client saw the flood's last line, a sentinel is echoed and the lagging
// client reads everything. It must see the flood's last line before the
// sentinel's echo, at least one marker, and each marker's count must be
// the gap between the numbered lines around it. Control: on 3f9f436 a full
// queue drops the newest frames, so the last flood line never reaches the
// lagging client and no marker is sent.
func TestConsoleLaggingClientGetsRecentWindow(t *testing.T) {
	s := newGameServer(t)
	parallelDocker(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}, mutate: func(c *config.Config) {
		c.Throttles.Enabled = false // every line reaches the sockets: the counts are exact
		// A write blocked by the lagging client is not cut before it reads.
		c.Testing.WebsocketWriteTimeoutMS = 120_000
	}})
	t.Cleanup(func() { n.request("DELETE", "/api/servers/"+s.UUID, nil, "") })
	n.request("POST", "/api/servers/"+s.UUID+"/power", map[string]any{"action": "start"}, "")
	n.waitState(s.UUID, "running", 60*time.Second)
	waitNextSecond()

	reader := n.mustDial(t, s.UUID)
	reader.auth(n.sign(t, wsClaims(s.UUID, wsUser1, "*")))
	lagging := n.dialAuthed(t, s.UUID, n.sign(t, wsClaims(s.UUID, wsUser1, "*"))) // not read yet

	const lines = 200000
	last := "flood line " + strconv.Itoa(lines)
	reader.send("send command", "flood "+strconv.Itoa(lines))
	reader.expect("console output", 120*time.Second, func(a string) bool { return a == last })
	reader.send("send command", "echo sentinel-38")
	reader.expect("console output", 60*time.Second, func(a string) bool { return a == "sentinel-38" })

	lagging.startReading()
	var (
		prev       = 0     // the last numbered line seen
		pending    = -1    // the count of a marker waiting for the next numbered line
		markers    = 0     // markers seen
		sawLast    = false // the flood's last line arrived
		received   = 0     // numbered lines received
		skippedSum = 0
	)
	deadline := time.Now().Add(120 * time.Second)
	for {
		m, ok := lagging.next(time.Until(deadline))
		if !ok {
			t.Fatalf("no sentinel on the lagging client (last numbered line %d, %d markers)\n%s", prev, markers, n.log)
		}
		if m.Event != "console output" {
			continue
		}
		a := m.Args[0]
		if a == "sentinel-38" {
			break
		}
		if sm := skippedRE.FindStringSubmatch(a); sm != nil {
			k, _ := strconv.Atoi(sm[1])
			if pending >= 0 {
				t.Fatalf("two markers in a row (%d, %d)", pending, k)
			}
			pending, markers, skippedSum = k, markers+1, skippedSum+k
			continue
		}
		num, ok := strings.CutPrefix(a, "flood line ")
		if !ok {
			continue // the TTY's echo of a command
		}
		i, err := strconv.Atoi(num)
		if err != nil || i <= prev {
			t.Fatalf("line %q after line %d", a, prev)
		}
		gap := i - prev - 1
		switch {
		case pending >= 0 && prev == 0:
			// Before the first numbered line, the TTY's echo of the flood
			// command may be among the skipped lines.
			if pending != gap && pending != gap+1 {
				t.Fatalf("marker of %d skipped lines before line %d", pending, i)
			}
		case pending >= 0 && pending != gap:
			t.Fatalf("marker of %d skipped lines between lines %d and %d", pending, prev, i)
		case pending < 0 && gap != 0:
			t.Fatalf("lines %d to %d missing without a marker", prev+1, i-1)
		}
		pending = -1
		prev = i
		received++
		sawLast = sawLast || a == last
	}
	t.Logf("lagging client: %d numbered lines, %d markers for %d skipped lines", received, markers, skippedSum)
	if !sawLast {
		t.Fatalf("the flood's last line did not reach the lagging client before the sentinel (last numbered line %d)", prev)
	}
	if markers == 0 {
		t.Fatal("no skipped-lines marker: the client did not lag (the test did not test)")
	}
	if pending >= 0 {
		t.Fatalf("a marker of %d lines after the last line", pending)
	}
}
