package server

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/runtime/runtimetest"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// monitorEnv is a running fake server whose node checks every second and
// walks every second (the fake engine has no processes to read: the walks
// and the entry counts are what the monitor has), with the monitor started.
func monitorEnv(t *testing.T, entryLimit int64) (*fakeEnv, *Server) {
	t.Helper()
	e, s := newFakeEnv(t, runtimetest.Process{StopCommand: "stop"}, func(c *config.Config, _ *Deps) {
		c.System.DiskCheckInterval, c.System.DiskWalkInterval, c.System.DiskEntryLimit = 1, 1, entryLimit
	})
	e.running(s)
	e.m.StartDiskMonitor()
	return e, s
}

// waitWalks waits until the monitor has walked the server n more times.
func waitWalks(t *testing.T, s *Server, n int) {
	t.Helper()
	for range n {
		last := s.lastDiskWalk()
		wait.For(t, 30*time.Second, func() bool { return s.lastDiskWalk().After(last) }, "a walk of the monitor")
	}
}

// Bytes written into the directory behind the sandbox's back (as the game
// does) past the disk limit: the monitor stops the server with the
// panels' line, gracefully (the stop command, not a kill). (The refused
// new start is tested end to end: the pre-start check reads the panel's
// limit, which this fake server has not.)
func TestDiskMonitorStopsAServerPastItsLimit(t *testing.T) {
	e, s := monitorEnv(t, 0)
	s.files.SetDiskLimit(1 << 20)
	// Control: under the limit, walks come and go and it runs on.
	if err := os.WriteFile(filepath.Join(s.DataDir(), "small"), make([]byte, 512<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	waitWalks(t, s, 2)
	if st := s.State(); st != Running || consoleHas(s, DiskLimitMessage) {
		t.Fatalf("under its limit: %s, console %q", st, s.ConsoleLines(10))
	}
	if err := os.WriteFile(filepath.Join(s.DataDir(), "big"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Offline)
	if !consoleHas(s, DiskLimitMessage) {
		t.Fatalf("the console does not say why: %q", s.ConsoleLines(10))
	}
	if e.rt.Count("signal "+s.UUID()+" SIGKILL") != 0 {
		t.Fatal("the server was killed, not stopped")
	}
}

// Entries past system.disk_entry_limit on a server without a disk limit:
// stopped; the control under the bound runs on.
func TestDiskMonitorStopsAServerWithTooManyEntries(t *testing.T) {
	_, s := monitorEnv(t, 50)
	mk := func(from, to int) {
		for i := from; i < to; i++ {
			if err := os.WriteFile(filepath.Join(s.DataDir(), "e"+strconv.Itoa(i)), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk(0, 50)
	waitWalks(t, s, 2)
	if st := s.State(); st != Running {
		t.Fatalf("at its entry limit: %s", st)
	}
	mk(50, 51)
	waitState(t, s, Offline)
	if !consoleHas(s, DiskLimitMessage) {
		t.Fatalf("the console does not say why: %q", s.ConsoleLines(10))
	}
	if err := s.Power(t.Context(), PowerStart, time.Second); err == nil || !consoleHas(s, "more than this node allows (50)") {
		t.Fatalf("a start past the entry limit: %v, console %q", err, s.ConsoleLines(10))
	}
}
