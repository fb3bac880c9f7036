package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// The game process is the server owner's (issue 32, items 4 and 5): these
// tests run a shell as the game (the busybox image, its console commands
// are shell lines) and fill the server's directory from inside the
// container, where the sandbox's own accounting never sees the writes.

const (
	diskLimitLine = "Server is exceeding the assigned disk space limit, stopping process now."
	checkInterval = 5 // system.disk_check_interval of these tests, seconds
)

// shellServer is a server whose process is busybox's sh reading the
// console: "exit" stops it, and "echo ready" makes it running.
func shellServer(t *testing.T, diskMiB int) devpanel.Server {
	t.Helper()
	testimages.Busybox(context.Background(), t)
	id := uuid.NewString()
	removeContainersAtCleanup(t, id)
	return devpanel.Server{
		UUID: id,
		Settings: map[string]any{
			"uuid": id, "suspended": false, "invocation": "sh",
			"build":     map[string]any{"memory_limit": 128, "swap": 0, "cpu_limit": 100, "disk_space": diskMiB},
			"container": map[string]any{"image": "~" + testimages.BusyboxTag},
		},
		ProcessConfiguration: map[string]any{
			"startup": map[string]any{"done": []string{"shell-ready"}},
			"stop":    map[string]any{"type": "command", "value": "exit"},
		},
	}
}

// startShell starts a shell server and waits until it runs.
func (n *node) startShell(id string) {
	n.t.Helper()
	n.power(id, "start")
	// "starting" comes before the container is attached: the command is
	// sent again until the daemon takes it.
	wait.For(n.t, 60*time.Second, func() bool {
		res, _ := n.request("POST", "/api/servers/"+id+"/commands", map[string]any{"commands": []string{"echo shell-ready"}}, "")
		return res.StatusCode == 204
	}, "the shell to take a command\n%s", n.log)
	n.waitState(id, "running", 30*time.Second)
}

// treeFigures returns the bytes allocated under dir and its entries.
func treeFigures(t *testing.T, dir string) (bytes int64, entries int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		entries++
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) == nil {
			bytes += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bytes, entries
}

// diskNode is a node with disk_check_interval 5 and the servers given, and
// a neighbour running the test game; mutate changes its configuration more.
func diskNode(t *testing.T, mutate func(c *config.Config), servers ...devpanel.Server) (*node, devpanel.Server) {
	t.Helper()
	neighbour := newGameServer(t)
	n := startNode(t, nodeOptions{
		servers: append(servers, neighbour),
		mutate: func(c *config.Config) {
			c.System.DiskCheckInterval = checkInterval
			if mutate != nil {
				mutate(c)
			}
		},
	})
	n.startRunning(neighbour)
	return n, neighbour
}

// neighbourAnswers checks that the daemon and the neighbour's console
// answer: a command typed into the neighbour comes back on its console.
func (n *node) neighbourAnswers(id string, round int) {
	n.t.Helper()
	word := fmt.Sprintf("neighbour-alive-%d", round)
	n.command(id, "echo "+word)
	n.waitLog(id, word)
}

// runUntilStopped waits (checking the neighbour all along) until the
// server is offline, and returns its console.
func (n *node) runUntilStopped(id, neighbour string, within time.Duration) []string {
	n.t.Helper()
	round := 0
	ok := wait.Until(within, func() bool {
		round++
		n.neighbourAnswers(neighbour, round)
		return n.details(id)["state"] == "offline"
	})
	if !ok {
		n.t.Fatalf("the server is still %v after %s\n%s", n.details(id)["state"], within, n.log)
	}
	return n.logs(id)
}

func hasLine(lines []string, substr string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, substr) })
}

// writer is the game's shell line writing 256 KiB into one file every
// 1/16 s (4 MiB/s) in the background, up to 100 MiB. The pause is the
// point: a game writing at a steady rate.
const writer = "i=0; while [ $i -lt 400 ]; do dd if=/dev/zero of=/home/container/world.dat bs=262144 count=1 seek=$i conv=notrunc 2>/dev/null; i=$((i+1)); usleep 62500; done &"

// Item 4: a game writing 4 MiB/s into its own directory under a 16 MiB
// limit is stopped, with the panels' console line, at most one check
// interval after it crossed the limit; the daemon and a neighbour answer
// throughout. Control: the same game under a 1 GiB limit keeps running
// past the same bytes.
func TestDiskMonitorStopsAGameWritingPastItsLimit(t *testing.T) {
	parallelDocker(t)
	hostile, control := shellServer(t, 16), shellServer(t, 1024)
	n, neighbour := diskNode(t, nil, hostile, control)
	n.startShell(hostile.UUID)
	n.startShell(control.UUID)
	n.command(hostile.UUID, writer)
	n.command(control.UUID, writer)

	lines := n.runUntilStopped(hostile.UUID, neighbour.UUID, 90*time.Second)
	if !hasLine(lines, diskLimitLine) {
		t.Fatalf("the console does not say why the server stopped:\n%s", strings.Join(lines, "\n"))
	}
	got, _ := treeFigures(t, n.serverDir(hostile.UUID))
	const limit, rate = 16 * mib, 4 * mib
	// One interval of writes past the limit, and one second for the stop.
	if most := int64(limit + rate*(checkInterval+1)); got > most {
		t.Fatalf("%d MiB in the directory when stopped, want at most %d MiB", got/mib, most/mib)
	}
	if got <= limit {
		t.Fatalf("control: only %d bytes written: the game never crossed the limit", got)
	}
	t.Logf("stopped with %.1f MiB in its directory (limit 16 MiB)", float64(got)/mib)

	// Control: the same writer under 1 GiB is past what stopped the other
	// and still runs.
	wait.For(t, 60*time.Second, func() bool {
		b, _ := treeFigures(t, n.serverDir(control.UUID))
		return b > limit+rate*(checkInterval+2)
	}, "the control game to write past %d MiB", (limit+rate*(checkInterval+2))/mib)
	if st := n.details(control.UUID)["state"]; st != "running" {
		t.Fatalf("control: the game under a 1 GiB limit is %v", st)
	}
	if hasLine(n.logs(control.UUID), diskLimitLine) {
		t.Fatal("control: the game under a 1 GiB limit was told it is past its limit")
	}
	n.assertAnswersEveryFace(t, neighbour.UUID)
	n.power(control.UUID, "kill")
	n.waitState(control.UUID, "offline", 30*time.Second)

	// It cannot be started again while it is over.
	n.power(hostile.UUID, "start")
	n.waitLog(hostile.UUID, "out of disk space")
}

// toucher makes empty files in the background, 2,000 a second (one batch
// of 2,000 then a one-second pause: a steady rate), 42,000 in all.
const toucher = "mkdir -p /home/container/many && cd /home/container/many && (for b in $(seq 0 20); do seq 1 2000 | sed s/^/e$b-/ | xargs touch; sleep 1; done &)"

// Item 5: 42,000 empty files at 2,000 a second under a 16 MiB limit stop
// the server by the 4 KiB each costs. Control: under a 1 GiB limit (and
// the default entry limit) the same game makes all 42,000 and runs on.
func TestDiskMonitorStopsAGameMakingTooManyFiles(t *testing.T) {
	parallelDocker(t)
	limited, control := shellServer(t, 16), shellServer(t, 1024)
	n, neighbour := diskNode(t, nil, limited, control)
	for _, s := range []devpanel.Server{limited, control} {
		n.startShell(s.UUID)
		n.command(s.UUID, toucher)
	}
	n.runUntilStopped(limited.UUID, neighbour.UUID, 90*time.Second)
	if !hasLine(n.logs(limited.UUID), diskLimitLine) {
		t.Fatal("the console does not say why the server stopped")
	}
	_, entries := treeFigures(t, n.serverDir(limited.UUID))
	// 16 MiB is 4,096 entries of 4 KiB; one interval at 2,000 a second
	// past them, and one second for the stop.
	if most := 4096 + 2000*(checkInterval+1); entries > most {
		t.Fatalf("%d entries when stopped, want at most %d", entries, most)
	}
	if entries <= 4096 {
		t.Fatalf("control: only %d entries made: the limit was never crossed", entries)
	}
	t.Logf("16 MiB limit: stopped with %d entries", entries)

	wait.For(t, 90*time.Second, func() bool {
		_, e := treeFigures(t, n.serverDir(control.UUID))
		return e > 42000
	}, "the control game to make its 42,000 files")
	if st := n.details(control.UUID)["state"]; st != "running" {
		t.Fatalf("control: the game under a 1 GiB limit is %v", st)
	}
	if hasLine(n.logs(control.UUID), diskLimitLine) {
		t.Fatal("control: the game under a 1 GiB limit was told it is past its limit")
	}
	n.assertAnswersEveryFace(t, neighbour.UUID)
	n.power(control.UUID, "kill")
	n.waitState(control.UUID, "offline", 30*time.Second)
}

// Item 5 with an unlimited disk (disk_space 0): the 4 KiB rule bounds
// nothing, system.disk_entry_limit (10,000 here) does. The control of
// the previous test shows the same 42,000 files run on without a bound in
// reach.
func TestDiskMonitorEntryLimitHoldsWithoutADiskLimit(t *testing.T) {
	parallelDocker(t)
	const entryLimit = 10000
	unlimited := shellServer(t, 0)
	n, neighbour := diskNode(t, func(c *config.Config) { c.System.DiskEntryLimit = entryLimit }, unlimited)
	n.startShell(unlimited.UUID)
	n.command(unlimited.UUID, toucher)
	n.runUntilStopped(unlimited.UUID, neighbour.UUID, 90*time.Second)
	if !hasLine(n.logs(unlimited.UUID), diskLimitLine) {
		t.Fatal("the console does not say why the server stopped")
	}
	_, entries := treeFigures(t, n.serverDir(unlimited.UUID))
	if most := entryLimit + 2000*(checkInterval+1); entries > most {
		t.Fatalf("%d entries when stopped, want at most %d", entries, most)
	}
	if entries <= entryLimit {
		t.Fatalf("control: only %d entries made: the entry limit was never crossed", entries)
	}
	t.Logf("entry limit %d: stopped with %d entries", entryLimit, entries)
	n.assertAnswersEveryFace(t, neighbour.UUID)
	// It cannot be started again while it holds too many.
	n.power(unlimited.UUID, "start")
	n.waitLog(unlimited.UUID, "more than this node allows")
}
