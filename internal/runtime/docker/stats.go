package docker

import (
	"context"
	"encoding/json"
	"math"
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
