// Package daemon boots the node agent: configuration, host preparation,
// backend client, servers, and the HTTP listener; and shuts it down.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/wharf/wharf/internal/activity"
	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/httpapi"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/pull"
	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/sftpd"
	"github.com/wharf/wharf/internal/tokens"
	"github.com/wharf/wharf/internal/transfer"
	"github.com/wharf/wharf/internal/wsapi"
)

// Options configure one run of the daemon.
type Options struct {
	ConfigPath string
	Debug      bool
	Version    string
	Commit     string // for the diagnostics report
	// BootTime is when the process started; websocket tokens issued before it are refused.
	BootTime time.Time
	// LogOutput receives the log; stderr when nil.
	LogOutput *os.File
	// LogFormat is "text" or "json"; system.log_format when empty.
	LogFormat string
	// Ready, when set, is called with the listener address once the API serves.
	Ready func(addr net.Addr)
}

// shutdownGrace bounds how long in-flight requests may take at shutdown.
const shutdownGrace = 30 * time.Second

// Run boots the daemon and serves until ctx is cancelled. Containers are
// never stopped by a daemon shutdown.
func Run(ctx context.Context, opts Options) error {
	cfg, err := config.Load(opts.ConfigPath)
	if err != nil {
		return err
	}
	level := new(slog.LevelVar)
	setLevel := func(c *config.Config) {
		if c.Debug || opts.Debug {
			level.Set(slog.LevelDebug)
		} else {
			level.Set(slog.LevelInfo)
		}
	}
	setLevel(cfg)
	out := opts.LogOutput
	if out == nil {
		out = os.Stderr
	}
	format := opts.LogFormat
	if format == "" {
		format = cfg.System.LogFormat
	}
	log := slog.New(newLogHandler(out, format, level))
	log.Info("starting", "app", cfg.AppName, "version", opts.Version, "config", opts.ConfigPath)
	if data, err := os.ReadFile(opts.ConfigPath); err == nil {
		if keys := config.UnknownKeys(data); len(keys) > 0 {
			// Another agent's settings (Wings'): kept in the file, unused here.
			log.Warn("ignoring configuration keys this version does not know", "keys", keys)
		}
	}

	store := config.NewStore(opts.ConfigPath, cfg)
	if next, err := prepareHost(cfg, log); err != nil {
		return err
	} else if next != nil {
		if err := store.Update(func(c *config.Config) { *c = *next }); err != nil {
			return fmt.Errorf("saving boot-time configuration: %w", err)
		}
	}

	client := panel.New(func() panel.Settings {
		c := store.Get()
		return panel.Settings{Remote: c.Remote, TokenID: c.TokenID, Token: c.Token, Timeout: time.Duration(c.RemoteQuery.Timeout) * time.Second, Headers: c.RemoteQuery.CustomHeaders}
	}, opts.Version)

	rt, err := newRuntime(ctx, store.Get(), log)
	if err != nil {
		return err
	}
	if err := ensureNetwork(ctx, log, store, rt); err != nil {
		return err
	}

	// Servers live as long as the daemon process; their goroutines are
	// stopped (containers untouched) after the API has shut down.
	nodeCtx, stopServers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServers()
	quotas := openQuotas(log, store.Get())
	if quotas != nil {
		defer quotas.Close()
	}
	servers := server.NewManager(nodeCtx, &server.Deps{
		Runtime: rt, Panel: client, Config: store, Log: log, Quotas: quotas,
	})
	defer servers.Close()
	if err := loadServers(ctx, log, store, servers); err != nil {
		return err
	}
	servers.Restore(ctx)

	// Backups and restores are jobs of the node; they end before the servers.
	backups := backup.New(nodeCtx, store, client, log)
	defer backups.Close()
	backups.CleanTemporaries()

	transfers := transfer.New(nodeCtx, transfer.Options{
		Servers: servers, Panel: client, Config: store, Backups: backups, Log: log,
	})
	defer transfers.Close()
	transfers.CleanupStale(ctx)

	// Remote downloads of the file manager; they end before the servers.
	pullCfg := store.Get().API.RemoteDownload
	pulls := pull.New(nodeCtx, pull.Options{MaxRedirects: pullCfg.MaxRedirects, AllowLoopback: pullCfg.AllowLoopback, Log: log})
	defer pulls.Close()

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if err := client.ResetServersState(ctx); err != nil && ctx.Err() == nil {
			log.Warn("could not tell the backend that the node booted", "error", err)
		}
	})

	oneTime, err := tokens.OpenOneTimeStore(filepath.Join(store.Get().System.RootDirectory, "used-token-ids"), time.Now)
	if err != nil {
		return fmt.Errorf("one-time token store: %w", err)
	}
	defer oneTime.Close()
	verifier := tokens.NewVerifier(func() []byte { return []byte(store.Get().Token) }, time.Now)

	acts, err := activity.Open(filepath.Join(store.Get().System.RootDirectory, "activity"), log, activity.WithMergeWindow(activityMergeWindow(store.Get())))
	if err != nil {
		return fmt.Errorf("activity queue: %w", err)
	}
	defer acts.Close()
	actsCtx, stopActs := context.WithCancel(ctx)
	defer stopActs() // before acts.Close and wg.Wait, also when serve fails
	wg.Go(func() {
		acts.Run(actsCtx, client.SendActivity,
			func() time.Duration { return time.Duration(store.Get().System.ActivitySendInterval) * time.Second },
			func() int { return store.Get().System.ActivitySendCount })
	})

	// SFTP sessions are closed (and their goroutines waited for) before
	// the activity queue and the servers go away.
	sftpCtx, stopSFTP := context.WithCancel(ctx)
	var sftpDone sync.WaitGroup
	defer func() { stopSFTP(); sftpDone.Wait() }()
	sftpSrv := sftpd.New(sftpd.Options{
		Config:  func() config.SFTP { return store.Get().System.SFTP },
		DataDir: store.Get().System.Data, Servers: servers, Panel: client, Activity: acts, Log: log,
	})
	sftpDone.Go(func() { sftpSrv.Run(sftpCtx) })

	denylist := tokens.NewDenylist(opts.BootTime)
	hub := wsapi.NewHub(wsapi.Options{
		Verifier: verifier,
		Denylist: denylist,
		Activity: acts,
		LogCount: func() int { return store.Get().System.WebsocketLogCount },
		Log:      log,
		// One full console throttle window fits in a socket's queue, so a
		// flood that the throttle lets through (and its notice) reaches
		// every client that keeps reading. Read live: /api/update applies.
		QueueSize: func() int { return max(wsapi.DefaultQueueSize, store.Get().Throttles.Lines+256) },

		WriteTimeout: websocketWriteTimeout(store.Get()), // the hub's default unless a test build says
	})
	// Sockets outlive the HTTP server's shutdown (they are hijacked): close
	// them with 1012 before the servers stop.
	defer hub.Close()
	if addr := store.Get().Metrics.BindAddress; addr != "" {
		startMetrics(ctx, &wg, addr, log, store, servers, acts, metricsSessions{websocket: hub.Sessions, sftp: sftpSrv.Sessions})
	}

	api := httpapi.New(httpapi.Deps{
		Config: store, Panel: client, Servers: servers, Backups: backups, Log: log,
		Tokens: verifier, OneTime: oneTime, Transfers: transfers,
		Version: opts.Version, BootTime: opts.BootTime,
		Denylist: denylist, Websockets: hub, Activity: acts, Pulls: pulls,
		OnConfigApplied: func(_, next *config.Config) { setLevel(next) },
		Runtime:         rt, ConfigPath: opts.ConfigPath, Commit: opts.Commit,
		Stopping: ctx,
	})
	return serve(ctx, log, store.Get(), api.Handler(), opts.Ready)
}

// loadServers fetches the node's servers, retrying while the backend is
// unreachable: a daemon that crash-loops helps nobody.
func loadServers(ctx context.Context, log *slog.Logger, store *config.Store, servers *server.Manager) error {
	b := backoff.NewExponentialBackOff()
	b.MaxInterval = 30 * time.Second
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		c := store.Get()
		err := servers.LoadFromPanel(ctx, c.RemoteQuery.BootServersPerPage)
		if err != nil && ctx.Err() == nil {
			log.Error("could not load servers from the backend; retrying", "error", err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0))
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func serve(ctx context.Context, log *slog.Logger, cfg *config.Config, h http.Handler, ready func(net.Addr)) error {
	addr := net.JoinHostPort(cfg.API.Host, strconv.Itoa(cfg.API.Port))
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Requests keep running through the shutdown grace period; whatever is
	// still open after it (hijacked websockets) is cancelled then.
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv.BaseContext = func(net.Listener) context.Context { return reqCtx }
	if cfg.API.SSL.Enabled {
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	log.Info("API listening", "address", ln.Addr().String(), "tls", cfg.API.SSL.Enabled)
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() {
		if cfg.API.SSL.Enabled {
			errc <- srv.ServeTLS(ln, cfg.API.SSL.Cert, cfg.API.SSL.Key)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("API server stopped: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// ensureNetwork creates the node's container network when missing and
// stores what Docker actually uses (the subnet may differ when the
// configured one overlaps an existing network).
func ensureNetwork(ctx context.Context, log *slog.Logger, store *config.Store, rt runtime.Runtime) error {
	n := store.Get().Docker.Network
	info, err := rt.EnsureNetwork(ctx, runtime.NetworkSpec{
		Name: n.Name, Driver: n.Driver, BridgeName: n.BridgeName, Internal: n.IsInternal,
		EnableICC: n.EnableICC, MTU: n.NetworkMTU, EnableIPv6: n.EnableIPv6,
		IPv4Subnet: n.Interfaces.V4.Subnet, IPv4Gate: n.Interfaces.V4.Gateway,
		IPv6Subnet: n.Interfaces.V6.Subnet, IPv6Gate: n.Interfaces.V6.Gateway,
	})
	if err != nil {
		return fmt.Errorf("docker network %s: %w", n.Name, err)
	}
	if info.Created {
		log.Info("created the docker network", "name", n.Name, "subnet", info.IPv4Subnet, "gateway", info.IPv4Gate)
	}
	iface := info.IPv4Gate
	switch info.Driver {
	case "host":
		iface = "127.0.0.1"
	case "overlay", "weavemesh":
		iface = ""
	}
	if iface == n.Interface && info.IPv4Subnet == n.Interfaces.V4.Subnet && info.IPv4Gate == n.Interfaces.V4.Gateway {
		return nil
	}
	return store.Update(func(c *config.Config) {
		c.Docker.Network.Interface = iface
		if info.IPv4Subnet != "" {
			c.Docker.Network.Interfaces.V4 = config.Subnet{Subnet: info.IPv4Subnet, Gateway: info.IPv4Gate}
		}
	})
}
