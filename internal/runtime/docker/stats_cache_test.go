package docker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// TestStatsWithoutPageCache: a game that writes a 200 MiB file fills the
// page cache, which its cgroup is charged for; the memory Wharf reports
// stays near the game process's RSS, on Docker (memory.stat from the
// engine) and on Podman (whose stats send no memory.stat: Wharf reads the
// container's cgroup). Control: the engine's own usage figure includes
// the cache.
func TestStatsWithoutPageCache(t *testing.T) {
	r := newRuntime(t)
	spec := gameServerSpec(t, r, "pagecache")
	spec.Limits.MemoryBytes = 512 << 20
	startGameServer(t, r, spec)
	execOutput(t, spec.Name, "/bin/busybox", "dd", "if=/dev/zero", "of=/home/container/cache.bin", "bs=1M", "count=200")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := rawClient(t)
	res, err := cli.ContainerStats(ctx, spec.Name, client.ContainerStatsOptions{Stream: false})
	if err != nil {
		t.Fatal(err)
	}
	var raw container.StatsResponse
	err = json.NewDecoder(res.Body).Decode(&raw)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if raw.MemoryStats.Usage < 150<<20 {
		t.Fatalf("control: after writing 200 MiB the engine reports %d bytes: its figure does not include the page cache here", raw.MemoryStats.Usage)
	}

	ch, err := r.Stats(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := <-ch
	if !ok {
		t.Fatal("no stats sample")
	}
	insp, err := inspectContainer(ctx, cli, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	rss := vmRSS(t, insp.State.Pid)
	t.Logf("%s: engine's usage %d MiB, Wharf's %d MiB, the game's RSS %d MiB",
		r.Name(), raw.MemoryStats.Usage>>20, s.MemoryBytes>>20, rss>>20)
	// The cgroup also holds the kernel's memory for the container (page
	// tables, slab, the dd's dirty pages still being written back): a
	// margin of 32 MiB, far below the 200 MiB of cache.
	if s.MemoryBytes > rss+32<<20 {
		t.Errorf("Wharf reports %d bytes for a game of RSS %d with 200 MiB in the page cache: the cache is counted", s.MemoryBytes, rss)
	}
}

// vmRSS is the resident set of a host process, in bytes.
func vmRSS(t *testing.T, pid int) uint64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// TestAddInactiveFile: the cache figure of memory.stat as cgroup v1 and v2
// write it, and never over a figure the engine sent.
func TestAddInactiveFile(t *testing.T) {
	dir := t.TempDir()
	v1 := filepath.Join(dir, "v1")
	v2 := filepath.Join(dir, "v2")
	if err := os.WriteFile(v1, []byte("cache 209723392\nrss 53248\ninactive_file 100\ntotal_cache 209723392\ntotal_inactive_file 209715200\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(v2, []byte("anon 2097152\nfile 209715200\nactive_file 8192\ninactive_file 209707008\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := container.MemoryStats{Usage: 215724032}
	addInactiveFile(&m, v1)
	if got := memoryUsage(&m); got != 215724032-209715200 {
		t.Errorf("v1: %d", got)
	}
	m = container.MemoryStats{Usage: 212000000}
	addInactiveFile(&m, v2)
	if got := memoryUsage(&m); got != 212000000-209707008 {
		t.Errorf("v2: %d", got)
	}
	m = container.MemoryStats{Usage: 1000, Stats: map[string]uint64{"inactive_file": 10}}
	addInactiveFile(&m, v1)
	if got := memoryUsage(&m); got != 990 {
		t.Errorf("the engine's own figure was replaced: %d", got)
	}
	m = container.MemoryStats{Usage: 1000}
	addInactiveFile(&m, filepath.Join(dir, "missing"))
	if got := memoryUsage(&m); got != 1000 {
		t.Errorf("no file: %d", got)
	}
}
