package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/wharf/wharf/internal/activity"
	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/backupview"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/firewall"
	"github.com/wharf/wharf/internal/httpapi"
	"github.com/wharf/wharf/internal/logtail"
	"github.com/wharf/wharf/internal/metrics"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/pull"
	"github.com/wharf/wharf/internal/quota"
	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/sftpd"
	"github.com/wharf/wharf/internal/statepush"
	"github.com/wharf/wharf/internal/tokens"
	"github.com/wharf/wharf/internal/transfer"
	"github.com/wharf/wharf/internal/wsapi"
)

// node holds the daemon's subsystems while it runs. Each field is set by
// the start of the subsystem that owns it; later subsystems read earlier
// ones' fields.
type node struct {
	opts      Options
	log       *slog.Logger
	logTail   *logtail.Tail // the last log lines, for the diagnostics report
	statePush *statepush.Pusher
	level     *slog.LevelVar
	store     *config.Store
	client    *panel.Client
	// metrics are the daemon's own collectors, fed by the panel client,
	// the API, backups and transfers, served by the metrics listener.
	metrics *metrics.Metrics
	rt      runtime.Runtime
	// network is the node's container network as the engine has it;
	// firewall is Wharf's firewall (nil when off or not applicable) and
	// serverRuntime the runtime the servers use: rt, or rt behind the
	// firewall's check.
	network       runtime.NetworkInfo
	firewall      *firewall.Firewall
	serverRuntime runtime.Runtime
	stopWatch     func()

	// nodeCtx is the context of the servers and the node's jobs: it lives
	// as long as the daemon process, not the run context.
	nodeCtx   context.Context
	stopNode  context.CancelFunc
	quotas    *quota.Quotas
	servers   *server.Manager
	backups   *backup.Service
	browse    *backupview.View
	transfers *transfer.Service
	pulls     *pull.Service
	// background joins the goroutines that end with the run context.
	background sync.WaitGroup
	oneTime    *tokens.OneTimeStore
	verifier   *tokens.Verifier
	acts       *activity.Queue
	stopActs   context.CancelFunc
	sftp       *sftpd.Server
	stopSFTP   func()
	denylist   *tokens.Denylist
	hub        *wsapi.Hub
	stopMetric func()
}

// subsystems lists the node's parts in start order; they stop in reverse.
// The servers outlive everything that uses them (jobs, SFTP, websockets),
// and the runtime outlives the servers. Containers are never stopped.
func (n *node) subsystems() []subsystem {
	return []subsystem{
		{name: "runtime", stop: n.closeRuntime},
		{name: "network", start: n.ensureNetwork},
		// Before any server: none starts without it (fail closed). Its
		// rules stay in the kernel at shutdown (servers keep running).
		{name: "firewall", start: n.startFirewall},
		{name: "firewall watch", start: n.startFirewallWatch, stop: func() { n.stopWatch() }},
		{name: "node context", start: n.openNodeContext, stop: func() { n.stopNode() }},
		{name: "quotas", start: n.openQuotas, stop: n.closeQuotas},
		// Started before the servers (their restored states are pushed) and
		// stopped after them (their last changes are queued).
		{name: "state pushes", start: n.startStatePush, stop: func() { n.statePush.Close() }},
		// The servers record their own activity (server:crashed): the queue
		// opens before them and closes after them.
		{name: "activity queue", start: n.openActivity, stop: func() { n.acts.Close() }},
		{name: "servers", start: n.startServers, stop: func() { n.servers.Close() }},
		// Backups, restores, transfers and remote downloads are jobs of
		// the node; they end before the servers.
		{name: "backups", start: n.startBackups, stop: func() { n.backups.Close() }},
		{name: "transfers", start: n.startTransfers, stop: func() { n.transfers.Close() }},
		{name: "remote downloads", start: n.startPulls, stop: func() { n.pulls.Close() }},
		{name: "background", start: n.reportBoot, stop: n.background.Wait},
		{name: "one-time tokens", start: n.openOneTime, stop: func() { n.oneTime.Close() }},
		// Cancelled before the queue closes, also when serving fails.
		{name: "activity delivery", start: n.deliverActivity, stop: func() { n.stopActs() }},
		// SFTP sessions are closed (and their goroutines waited for)
		// before the activity queue and the servers go away.
		{name: "sftp", start: n.startSFTP, stop: func() { n.stopSFTP() }},
		// Sockets outlive the HTTP server's shutdown (they are hijacked):
		// closed with 1012 before the servers stop.
		{name: "websockets", start: n.startHub, stop: func() { n.hub.Close() }},
		{name: "metrics", start: n.startMetrics, stop: func() { n.stopMetric() }},
	}
}

// closeRuntime releases the runtime's connections when it holds any.
func (n *node) closeRuntime() {
	if c, ok := n.rt.(io.Closer); ok {
		if err := c.Close(); err != nil {
			n.log.Debug("closing the runtime", "error", err)
		}
	}
}

func (n *node) ensureNetwork(ctx context.Context) error {
	info, err := ensureNetwork(ctx, n.log, n.store, n.rt)
	n.network = info
	return err
}

func (n *node) openNodeContext(ctx context.Context) error {
	n.nodeCtx, n.stopNode = context.WithCancel(context.WithoutCancel(ctx))
	return nil
}

func (n *node) openQuotas(context.Context) error {
	n.quotas = openQuotas(n.log, n.store.Get())
	return nil
}

func (n *node) closeQuotas() {
	if n.quotas != nil {
		n.quotas.Close()
	}
}

// startStatePush starts telling the panel of state changes.
func (n *node) startStatePush(context.Context) error {
	n.statePush = statepush.New(n.client.PushContainerStatus, n.log, nil)
	return nil
}

// startServers loads the node's servers and restores their states. Their
// goroutines stop (containers untouched) after the API has shut down.
func (n *node) startServers(ctx context.Context) error {
	n.servers = server.NewManager(n.nodeCtx, &server.Deps{
		Runtime: n.serverRuntime, Panel: n.client, Config: n.store, Log: n.log, Quotas: n.quotas,
		StatePush: n.statePush, Activity: n.acts,
	})
	if err := loadServers(ctx, n.log, n.store, n.servers); err != nil {
		n.servers.Close()
		return err
	}
	n.servers.Restore(ctx)
	n.servers.StartDiskMonitor()
	return nil
}

func (n *node) startBackups(context.Context) error {
	n.backups = backup.New(n.nodeCtx, n.store, n.client, n.log).WithMetrics(n.metrics)
	n.browse = backupview.New(n.backups.BrowseSource)
	n.backups.CleanTemporaries()
	return nil
}

func (n *node) startTransfers(ctx context.Context) error {
	n.transfers = transfer.New(n.nodeCtx, transfer.Options{
		Servers: n.servers, Panel: n.client, Config: n.store, Backups: n.backups, Log: n.log,
		Metrics: n.metrics,
	})
	n.transfers.CleanupStale(ctx)
	return nil
}

func (n *node) startPulls(context.Context) error {
	c := n.store.Get().API.RemoteDownload
	n.pulls = pull.New(n.nodeCtx, pull.Options{MaxRedirects: c.MaxRedirects, AllowLoopback: c.AllowLoopback, Log: n.log})
	return nil
}

// reportBoot tells the backend that the node booted, in the background.
func (n *node) reportBoot(ctx context.Context) error {
	n.background.Go(func() {
		if err := n.client.ResetServersState(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("could not tell the backend that the node booted", "error", err)
		}
	})
	return nil
}

func (n *node) openOneTime(context.Context) error {
	oneTime, err := tokens.OpenOneTimeStore(filepath.Join(n.store.Get().System.RootDirectory, "used-token-ids"), time.Now)
	if err != nil {
		return fmt.Errorf("one-time token store: %w", err)
	}
	n.oneTime = oneTime
	n.verifier = tokens.NewVerifier(func() []byte { return []byte(n.store.Get().Token) }, time.Now)
	n.verifier.RequireScope(func() bool { return n.store.Get().API.RequireTokenScope })
	return nil
}

func (n *node) openActivity(context.Context) error {
	acts, err := activity.Open(filepath.Join(n.store.Get().System.RootDirectory, "activity"), n.log, activity.WithMergeWindow(activityMergeWindow(n.store.Get())))
	if err != nil {
		return fmt.Errorf("activity queue: %w", err)
	}
	n.acts = acts
	return nil
}

// deliverActivity sends the activity queue to the backend in the
// background until stopped.
func (n *node) deliverActivity(ctx context.Context) error {
	actsCtx, stop := context.WithCancel(ctx)
	n.stopActs = stop
	n.background.Go(func() {
		n.acts.Run(actsCtx, n.client.SendActivity,
			func() time.Duration { return time.Duration(n.store.Get().System.ActivitySendInterval) * time.Second },
			func() int { return n.store.Get().System.ActivitySendCount })
	})
	return nil
}

func (n *node) startSFTP(ctx context.Context) error {
	sftpCtx, stop := context.WithCancel(ctx)
	var done sync.WaitGroup
	n.stopSFTP = func() { stop(); done.Wait() }
	n.sftp = sftpd.New(sftpd.Options{
		Config:  func() config.SFTP { return n.store.Get().System.SFTP },
		DataDir: n.store.Get().System.Data, Servers: n.servers, Panel: n.client, Activity: n.acts, Log: n.log,
		Browse: n.browse,
	})
	done.Go(func() { n.sftp.Run(sftpCtx) })
	return nil
}

func (n *node) startHub(context.Context) error {
	n.denylist = tokens.NewDenylist(n.opts.BootTime)
	n.hub = wsapi.NewHub(wsapi.Options{
		Verifier: n.verifier,
		Denylist: n.denylist,
		Activity: n.acts,
		LogCount: func() int { return n.store.Get().System.WebsocketLogCount },
		Log:      n.log,
		// One full console throttle window fits in a socket's queue, so a
		// flood that the throttle lets through (and its notice) reaches
		// every client that keeps reading. Read live: /api/update applies.
		QueueSize: func() int { return max(wsapi.DefaultQueueSize, n.store.Get().Throttles.Lines+256) },

		WriteTimeout: websocketWriteTimeout(n.store.Get()), // the hub's default unless a test build says
		// Issue 38: the marker of the console lines a lagging socket
		// skipped is one of the daemon's own lines.
		SkippedLine: func(k int) string { return server.DaemonLine(n.store.Get().AppName, events.SkippedText(k)) },
	})
	return nil
}

// startMetrics serves the Prometheus endpoint when metrics.bind_address
// is set, until stopped or the run context ends.
func (n *node) startMetrics(ctx context.Context) error {
	n.stopMetric = func() {}
	addr := n.store.Get().Metrics.BindAddress
	if addr == "" {
		return nil
	}
	mctx, stop := context.WithCancel(ctx)
	var done sync.WaitGroup
	n.stopMetric = func() { stop(); done.Wait() }
	startMetrics(mctx, &done, addr, n.metrics, n.log, n.store, n.servers, n.acts, metricsSessions{websocket: n.hub.Sessions, sftp: n.sftp.Sessions})
	return nil
}

// api builds the HTTP API over the started subsystems.
func (n *node) api(ctx context.Context) *httpapi.API {
	return httpapi.New(httpapi.Deps{
		Config: n.store, Servers: n.servers, Backups: n.backups, Browse: n.browse, Log: n.log,
		Tokens: n.verifier, OneTime: n.oneTime, Transfers: n.transfers,
		Version: n.opts.Version, BootTime: n.opts.BootTime,
		Denylist: n.denylist, Websockets: n.hub, Activity: n.acts, Pulls: n.pulls,
		OnConfigApplied: func(_, next *config.Config) { n.setLevel(next) },
		Runtime:         n.rt, ConfigPath: n.opts.ConfigPath, Commit: n.opts.Commit,
		RecentLogs: n.logTail.Last, Metrics: n.metrics,
		Stopping: ctx,
	})
}

// setLevel applies the configured log level (debug when asked on the
// command line).
func (n *node) setLevel(c *config.Config) {
	if c.Debug || n.opts.Debug {
		n.level.Set(slog.LevelDebug)
	} else {
		n.level.Set(slog.LevelInfo)
	}
}
