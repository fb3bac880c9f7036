package daemon

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/wharf/wharf/internal/activity"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/metrics"
	"github.com/wharf/wharf/internal/server"
)

// metricsSessions are the live session counts of their owners.
type metricsSessions struct {
	websocket, sftp func() int
}

// startMetrics serves the Prometheus endpoint on its own listener until ctx
// ends. A listener that cannot start is logged, never fatal: metrics are
// not worth a node that does not boot.
func startMetrics(ctx context.Context, wg *sync.WaitGroup, addr string, m *metrics.Metrics, log *slog.Logger, store *config.Store, servers *server.Manager, acts *activity.Queue, sessions metricsSessions) {
	reg := metrics.NewRegistry(m, metrics.Sources{
		Servers:           func() []metrics.ServerSample { return serverSamples(servers) },
		ActivityPending:   acts.PendingBytes,
		WebsocketSessions: sessions.websocket,
		SFTPSessions:      sessions.sftp,
	})
	h := metrics.Handler(reg, func() string { return store.Get().Metrics.Token }, log)
	wg.Go(func() {
		if err := metrics.Serve(ctx, addr, h, log, nil); err != nil {
			log.Error("the metrics endpoint stopped", "error", err)
		}
	})
}

func serverSamples(servers *server.Manager) []metrics.ServerSample {
	all := servers.All()
	out := make([]metrics.ServerSample, 0, len(all))
	for _, s := range all {
		u := s.Utilization()
		out = append(out, metrics.ServerSample{
			UUID: s.UUID(), State: string(u.State), CPUPercent: u.CPUAbsolute,
			MemoryBytes: u.MemoryBytes, MemoryLimitBytes: u.MemoryLimitBytes,
			RxBytes: u.Network.RxBytes, TxBytes: u.Network.TxBytes,
			DiskBytes: u.DiskBytes, Uptime: time.Duration(u.Uptime) * time.Millisecond,
		})
	}
	return out
}
