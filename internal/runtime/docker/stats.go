package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/runtime"
)

// Stats streams the container's resource samples (the engine sends about
// one a second). The channel is closed when the stream ends (the container
// stopped), on a decode error, or when ctx ends; the response body is always
// closed then.
func (r *Runtime) Stats(ctx context.Context, name string) (<-chan runtime.Stats, error) {
	ctx, cancel := context.WithCancel(ctx)
	resp, err := r.cli.ContainerStats(ctx, name, client.ContainerStatsOptions{Stream: true})
	if err != nil {
		cancel()
		return nil, wrap("stats", name, err)
	}
	// Podman's compatible stats count the page cache in the usage and
	// send no memory.stat counters to subtract (issue 37): Wharf reads
	// them from the container's cgroup itself.
	memStat := ""
	if r.eng.podman() {
		memStat = r.podmanMemoryStat(ctx, name)
	}
	ch := make(chan runtime.Stats)
	go func() {
		defer close(ch)
		defer cancel()
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var s container.StatsResponse
			if err := dec.Decode(&s); err != nil {
				return
			}
			// A container that is not running yields zeroed samples.
			if s.Read.IsZero() {
				return
			}
			if memStat != "" {
				addInactiveFile(&s.MemoryStats, memStat)
			}
			select {
			case ch <- convertStats(&s):
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// convertStats turns one engine sample into runtime.Stats.
func convertStats(s *container.StatsResponse) runtime.Stats {
	out := runtime.Stats{
		MemoryBytes:      memoryUsage(&s.MemoryStats),
		MemoryLimitBytes: s.MemoryStats.Limit,
		CPUAbsolute:      cpuAbsolute(s),
	}
	for _, n := range s.Networks {
		out.RxBytes += n.RxBytes
		out.TxBytes += n.TxBytes
	}
	// The engine reports the block I/O counters as "Read"/"Write" on cgroup
	// v1 and "read"/"write" (from io.stat) on v2.
	for _, e := range s.BlkioStats.IoServiceBytesRecursive {
		switch strings.ToLower(e.Op) {
		case "read":
			out.DiskReadBytes += e.Value
		case "write":
			out.DiskWriteBytes += e.Value
		}
	}
	return out
}

// memoryUsage is the usage without the inactive file cache, as the Docker
// CLI computes it: total_inactive_file on cgroup v1, inactive_file on v2.
func memoryUsage(m *container.MemoryStats) uint64 {
	if v, ok := m.Stats["total_inactive_file"]; ok && v < m.Usage {
		return m.Usage - v
	}
	if v, ok := m.Stats["inactive_file"]; ok && v < m.Usage {
		return m.Usage - v
	}
	return m.Usage
}

// cpuAbsolute is the Docker CLI's CPU percentage: the container's share of
// the host's CPU time since the previous sample times the number of online
// CPUs, so one busy core is 100 and the value can exceed 100. Rounded to
// three decimals.
func cpuAbsolute(s *container.StatsResponse) float64 {
	cur, prev := s.CPUStats, s.PreCPUStats
	if cur.CPUUsage.TotalUsage < prev.CPUUsage.TotalUsage || cur.SystemUsage < prev.SystemUsage {
		return 0
	}
	cpuDelta := float64(cur.CPUUsage.TotalUsage - prev.CPUUsage.TotalUsage)
	sysDelta := float64(cur.SystemUsage - prev.SystemUsage)
	cpus := float64(cur.OnlineCPUs)
	if cpus == 0 {
		cpus = float64(len(cur.CPUUsage.PercpuUsage))
	}
	if cpuDelta <= 0 || sysDelta <= 0 || cpus == 0 {
		return 0
	}
	return math.Round(cpuDelta/sysDelta*cpus*100*1000) / 1000
}

// cgroupRoot is where the host's cgroup filesystems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// podmanMemoryStat is the memory.stat file of a Podman container's cgroup
// (Podman's own inspect names the cgroup: State.CgroupPath), or "" when
// there is none to read: a rootless engine on cgroup v1 has no cgroup of
// its own per container, and a Wharf in a container may not see the
// host's. The usage then stays the engine's figure, cache included.
func (r *Runtime) podmanMemoryStat(ctx context.Context, name string) string {
	var insp struct {
		State struct {
			CgroupPath string `json:"CgroupPath"`
		} `json:"State"`
	}
	if err := r.libpodGet(ctx, "/containers/"+url.PathEscape(name)+"/json", &insp); err != nil || insp.State.CgroupPath == "" {
		return ""
	}
	p := filepath.Join(cgroupRoot, insp.State.CgroupPath, "memory.stat")
	if r.eng.cgroupV1 {
		p = filepath.Join(cgroupRoot, "memory", insp.State.CgroupPath, "memory.stat")
	}
	if _, err := os.Stat(p); err != nil {
		r.log.Debug("no memory.stat for the container: its memory usage includes the page cache", "container", name, "path", p)
		return ""
	}
	return p
}

// addInactiveFile puts the inactive file cache of a cgroup's memory.stat
// (total_inactive_file on v1, inactive_file on v2) into m.Stats under the
// name memoryUsage subtracts, unless the engine sent it itself.
func addInactiveFile(m *container.MemoryStats, path string) {
	if _, ok := m.Stats["total_inactive_file"]; ok {
		return
	}
	if _, ok := m.Stats["inactive_file"]; ok {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || (key != "total_inactive_file" && key != "inactive_file") {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err != nil {
			continue
		}
		if m.Stats == nil {
			m.Stats = map[string]uint64{}
		}
		// v1 has both (inactive_file is the cgroup's own, without its
		// children): total_inactive_file wins in memoryUsage.
		m.Stats[key] = v
	}
}
