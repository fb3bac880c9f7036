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
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/logtail"
	"github.com/wharf/wharf/internal/metrics"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/server"
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
	n := &node{opts: opts, level: new(slog.LevelVar), metrics: metrics.New()}
	if err := n.boot(); err != nil {
		return err
	}

	// The container runtime; closed after everything else (first in the
	// subsystem list).
	rt, err := newRuntime(ctx, n.store.Get(), n.log)
	if err != nil {
		return err
	}
	n.rt = rt

	life := lifecycle{log: n.log}
	defer life.stop()
	if err := life.start(ctx, n.subsystems()); err != nil {
		return err
	}
	return serve(ctx, n.log, n.store.Get(), n.api(ctx).Handler(), opts.Ready)
}

// boot loads the configuration, opens the log, prepares the host and
// builds the backend client: everything before the runtime.
func (n *node) boot() error {
	opts := n.opts
	cfg, err := config.Load(opts.ConfigPath)
	if err != nil {
		return err
	}
	n.setLevel(cfg)
	out := opts.LogOutput
	if out == nil {
		out = os.Stderr
	}
	format := opts.LogFormat
	if format == "" {
		format = cfg.System.LogFormat
	}
	// The tail keeps the last lines for the diagnostics report.
	n.logTail = logtail.New(out)
	n.log = slog.New(newLogHandler(n.logTail, format, n.level))
	n.log.Info("starting", "app", cfg.AppName, "version", opts.Version, "config", opts.ConfigPath)
	if data, err := os.ReadFile(opts.ConfigPath); err == nil {
		if keys := config.UnknownKeys(data); len(keys) > 0 {
			// Another agent's settings (Wings'): kept in the file, unused here.
			n.log.Warn("ignoring configuration keys this version does not know", "keys", keys)
		}
	}

	n.store = config.NewStore(opts.ConfigPath, cfg)
	if err := applyICCDefault(n.store, n.log); err != nil {
		return err
	}
	cfg = n.store.Get()
	if next, err := prepareHost(cfg, n.log); err != nil {
		return err
	} else if next != nil {
		if err := n.store.Update(func(c *config.Config) { *c = *next }); err != nil {
			return fmt.Errorf("saving boot-time configuration: %w", err)
		}
	}

	store := n.store
	n.client = panel.New(func() panel.Settings {
		c := store.Get()
		return panel.Settings{Remote: c.Remote, TokenID: c.TokenID, Token: c.Token, Timeout: time.Duration(c.RemoteQuery.Timeout) * time.Second, Headers: c.RemoteQuery.CustomHeaders}
	}, opts.Version).WithMetrics(n.metrics)
	return nil
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
func ensureNetwork(ctx context.Context, log *slog.Logger, store *config.Store, rt runtime.Runtime) (runtime.NetworkInfo, error) {
	n := store.Get().Docker.Network
	info, err := rt.EnsureNetwork(ctx, runtime.NetworkSpec{
		Name: n.Name, Driver: n.Driver, BridgeName: n.BridgeName, Internal: n.IsInternal,
		EnableICC: n.EnableICC, MTU: n.NetworkMTU, EnableIPv6: n.EnableIPv6,
		IPv4Subnet: n.Interfaces.V4.Subnet, IPv4Gate: n.Interfaces.V4.Gateway,
		IPv6Subnet: n.Interfaces.V6.Subnet, IPv6Gate: n.Interfaces.V6.Gateway,
	})
	if err != nil {
		return info, fmt.Errorf("docker network %s: %w", n.Name, err)
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
		return info, nil
	}
	return info, store.Update(func(c *config.Config) {
		c.Docker.Network.Interface = iface
		if info.IPv4Subnet != "" {
			c.Docker.Network.Interfaces.V4 = config.Subnet{Subnet: info.IPv4Subnet, Gateway: info.IPv4Gate}
		}
	})
}
