package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/wait"
)

func figuresEnv(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestDiskMonitorNodeFigures measures, on the real binary (WHARF_E2E_BINARY
// for another build, such as main's), a node of WHARF_DISK_FIGURES_SERVERS
// (100) running servers with WHARF_DISK_FIGURES_FILES (10,000) files each:
// the daemon's CPU per minute (utime + stime from /proc) over a window of
// WHARF_DISK_FIGURES_WINDOW seconds (150) with system.disk_check_interval
// WHARF_DISK_FIGURES_CHECK (5) and system.disk_walk_interval
// WHARF_DISK_FIGURES_WALK (150), then the time from one server's crossing
// of its disk limit (a game writing 4 MiB/s; the crossing seen from the
// host) to its stop. The figures go to docs/benchmarks.md (issue 32).
//
//	WHARF_DISK_FIGURES=1 WHARF_REQUIRE_DOCKER=1 go test -p 1 -count=1 -timeout 60m \
//	    -run TestDiskMonitorNodeFigures -v ./internal/e2e/
func TestDiskMonitorNodeFigures(t *testing.T) {
	if os.Getenv("WHARF_DISK_FIGURES") != "1" {
		t.Skip("set WHARF_DISK_FIGURES=1")
	}
	nServers := figuresEnv("WHARF_DISK_FIGURES_SERVERS", 100)
	nFiles := figuresEnv("WHARF_DISK_FIGURES_FILES", 10000)
	check := figuresEnv("WHARF_DISK_FIGURES_CHECK", 5)
	walk := figuresEnv("WHARF_DISK_FIGURES_WALK", 150)
	window := time.Duration(figuresEnv("WHARF_DISK_FIGURES_WINDOW", 150)) * time.Second

	// Server 0 is the writer (a shell, 64 MiB: its 10,000 files hold 40
	// MiB of it); the others run the test game under 1 GiB.
	hot := shellServer(t, 64)
	servers := []devpanel.Server{hot}
	for range nServers - 1 {
		s := gameServer(uuid.NewString())
		s.Settings["build"] = map[string]any{"memory_limit": 64, "swap": 0, "cpu_limit": 100, "disk_space": 1024}
		removeContainersAtCleanup(t, s.UUID)
		servers = append(servers, s)
	}
	newGameServer(t) // builds the game image
	data := t.TempDir()
	start := time.Now()
	for _, s := range servers {
		makeFiles(t, filepath.Join(data, s.UUID), nFiles)
	}
	t.Logf("%d servers × %d files made in %s", nServers, nFiles, time.Since(start).Round(time.Second))
	n := startNode(t, nodeOptions{servers: servers, mutate: func(c *config.Config) {
		c.System.Data = data
		c.System.DiskCheckInterval = check
		c.System.DiskWalkInterval = walk
	}})
	start = time.Now()
	for _, s := range servers[1:] {
		n.power(s.UUID, "start")
	}
	for _, s := range servers[1:] {
		n.waitState(s.UUID, "running", 10*time.Minute)
	}
	n.startShell(hot.UUID)
	t.Logf("all running after %s", time.Since(start).Round(time.Second))

	// Each phase runs a daemon on the same node: the containers run on
	// between phases (a daemon's stop leaves them running; the next boot
	// re-attaches them). WHARF_DISK_FIGURES_REF is a reference binary
	// (main's), measured at its default interval (150 s) and at 5 s.
	phases := []struct {
		label, binary string
		check, walk   int
	}{{"this change", wharfBinary, check, walk}}
	if ref := os.Getenv("WHARF_DISK_FIGURES_REF"); ref != "" {
		phases = append(phases,
			struct {
				label, binary string
				check, walk   int
			}{"reference, 150 s", ref, 150, 150},
			struct {
				label, binary string
				check, walk   int
			}{"reference, 5 s", ref, 5, 150})
	}
	ours := wharfBinary
	defer func() { wharfBinary = ours }()
	for i, ph := range phases {
		if i > 0 {
			n.stop()
			wharfBinary = ph.binary
			n.Config.System.DiskCheckInterval, n.Config.System.DiskWalkInterval = ph.check, ph.walk
			if err := n.Config.Save(n.CfgPath); err != nil {
				t.Fatal(err)
			}
			n.restart()
			for _, s := range servers[1:] {
				n.waitState(s.UUID, "running", 2*time.Minute)
			}
		}
		// The settling time and the window are the point of the test:
		// the daemon's CPU over a fixed time, every server running and
		// idle, after the walks every daemon makes at boot.
		time.Sleep(20 * time.Second)
		load0 := loadAvg()
		c0 := n.cpuTicks()
		// The measuring window of the figure.
		time.Sleep(window)
		cpu := float64(n.cpuTicks()-c0) / 100
		t.Logf("FIGURES %s: binary=%s servers=%d files=%d check=%ds walk=%ds window=%s daemon-cpu=%.2fs (%.3f s/min) load=%s..%s",
			ph.label, ph.binary, nServers, nFiles, ph.check, ph.walk, window, cpu, cpu/window.Minutes(), load0, loadAvg())
	}
	if len(phases) > 1 {
		// Back to this change for the stop.
		n.stop()
		wharfBinary = ours
		n.Config.System.DiskCheckInterval, n.Config.System.DiskWalkInterval = check, walk
		if err := n.Config.Save(n.CfgPath); err != nil {
			t.Fatal(err)
		}
		n.restart()
		n.waitState(hot.UUID, "running", 2*time.Minute)
	}
	crossing, stop := n.crossingToStop(t, hot.UUID, 64*mib, 90*time.Second)
	t.Logf("FIGURES crossing-to-stop=%s (the writer crossed 64 MiB after %s of writing; check=%ds)", stop, crossing, check)
}

// makeFiles makes dir with files empty files in directories of 100.
func makeFiles(t *testing.T, dir string, files int) {
	t.Helper()
	for i := 0; i < files; i++ {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		f, err := os.Create(filepath.Join(sub, fmt.Sprintf("f%03d", i%100)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}

// crossingToStop starts the 4 MiB/s writer in the shell server id, watches
// its directory's allocated bytes from the host (its tree as it was plus
// the one file the writer grows) and returns how long the writing took to
// cross limit and how long after the crossing the server was offline
// (a negative duration: not stopped within most).
func (n *node) crossingToStop(t *testing.T, id string, limit int64, most time.Duration) (time.Duration, time.Duration) {
	t.Helper()
	dir := n.serverDir(id)
	// What the tree counts for by the sandbox's rule: every entry at least
	// 4 KiB (its 10,000 empty files allocate nothing on disk).
	var base int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) == nil {
			base += max(st.Blocks*512, 4096)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n.command(id, writer)
	began := time.Now()
	var crossed time.Time
	wait.Until(most, func() bool {
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(dir, "world.dat"), &st) == nil && base+st.Blocks*512 > limit {
			crossed = time.Now()
			return true
		}
		return false
	})
	if crossed.IsZero() {
		t.Fatalf("the writer never crossed %d MiB (state %v):\n%s", limit/mib, n.details(id)["state"], strings.Join(n.logs(id), "\n"))
	}
	stopped := wait.Until(most, func() bool { return n.details(id)["state"] == "offline" })
	if !stopped {
		n.power(id, "kill")
		return crossed.Sub(began), -1
	}
	return crossed.Sub(began), time.Since(crossed)
}
