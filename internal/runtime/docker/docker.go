// Package docker implements runtime.Runtime with the official Docker Go
// client. The API version is negotiated with the engine, so the same binary
// works with Docker Engine 20.10 (API 1.41) and current releases.
package docker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/runtime"
)

// Options configures New.
type Options struct {
	// Logger receives warnings (for example engine warnings on create).
	// Nil means slog.Default().
	Logger *slog.Logger
	// Host overrides the engine address ("unix:///var/run/docker.sock").
	// Empty means the environment (DOCKER_HOST, ...) or the default socket.
	Host string
	// HTTPClient overrides the HTTP client; mainly for tests.
	HTTPClient *http.Client
	// StateDir is a directory of Wharf's own (under system.root_directory)
	// where the seccomp profiles Podman reads as files are written. Needed
	// on Podman only.
	StateDir string
}

// Runtime is the Docker implementation of runtime.Runtime. It is safe for
// concurrent use. Close it when done.
type Runtime struct {
	cli      *client.Client
	log      *slog.Logger
	eng      engine
	profiles *seccompProfiles
}

var _ runtime.Runtime = (*Runtime)(nil)

// New connects to the Docker engine named by the environment (or
// opts.Host), negotiates the API version and checks that the engine answers.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	// The client negotiates the API version on its first request by
	// default; the Ping below does that explicitly (down to 1.41 for
	// Engine 20.10).
	clientOpts := []client.Opt{client.FromEnv}
	if opts.Host != "" {
		clientOpts = append(clientOpts, client.WithHost(opts.Host))
	}
	if opts.HTTPClient != nil {
		clientOpts = append(clientOpts, client.WithHTTPClient(opts.HTTPClient))
	}
	cli, err := client.New(clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("docker: client: %w", err)
	}
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker: engine at %s does not answer: %w", cli.DaemonHost(), err)
	}
	eng, err := detectEngine(ctx, cli)
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker: engine at %s: %w", cli.DaemonHost(), err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	r := &Runtime{
		cli:      cli,
		log:      log.With("component", "docker"),
		eng:      eng,
		profiles: &seccompProfiles{dir: opts.StateDir},
	}
	if eng.podman() && !eng.rootless {
		rootless, err := r.podmanRootless(ctx)
		if err != nil {
			cli.Close()
			return nil, fmt.Errorf("docker: engine at %s: %w", cli.DaemonHost(), err)
		}
		r.eng.rootless = rootless
	}
	return r, nil
}

// APIVersion returns the negotiated Docker API version.
func (r *Runtime) APIVersion() string { return r.cli.ClientVersion() }

// Close releases the client's connections.
func (r *Runtime) Close() error { return r.cli.Close() }

// wrap turns engine "not found" errors into runtime.ErrNotFound, keeping the
// engine's message.
func wrap(op, name string, err error) error {
	if err == nil {
		return nil
	}
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker: %s %s: %w (%v)", op, name, runtime.ErrNotFound, err)
	}
	return fmt.Errorf("docker: %s %s: %w", op, name, err)
}

// isNotRunning reports whether err is the engine's "container is not
// running" conflict (Podman: "can only kill running containers … container
// state improper", a 500 rather than a 409).
func isNotRunning(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return cerrdefs.IsConflict(err) || strings.Contains(msg, "is not running") ||
		strings.Contains(msg, "can only kill running containers") || strings.Contains(msg, "container state improper")
}
