package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/runtime/docker"
)

// newRuntime returns the container runtime of the node: Docker, or, in a
// binary built for the end-to-end tests and told so by its configuration
// (testing.runtime: fake), the in-memory runtime of runtime/runtimetest.
func newRuntime(ctx context.Context, cfg *config.Config, log *slog.Logger) (runtime.Runtime, error) {
	if !cfg.Testing.IsZero() && !testBuild {
		return nil, fmt.Errorf("the configuration has a testing section, which only a test build (go build -tags %s) accepts: remove it", testBuildTag)
	}
	if cfg.Testing.Runtime == config.TestRuntimeFake {
		log.Warn("running servers on the in-memory test runtime: no container is ever started")
		return fakeRuntime(), nil
	}
	rt, err := docker.New(ctx, docker.Options{
		Host:     cfg.Docker.Host,
		Logger:   log,
		StateDir: filepath.Join(cfg.System.RootDirectory, "engine"),
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to the container engine (docker.host %q, else DOCKER_HOST): %w", cfg.Docker.Host, err)
	}
	if err := checkEngine(rt, cfg, log); err != nil {
		rt.Close()
		return nil, err
	}
	return rt, nil
}

// testBuildTag is the build tag of the binaries the end-to-end tests run.
const testBuildTag = "wharf_testruntime"

// websocketWriteTimeout is testing.websocket_write_timeout_ms, or zero (the
// hub's default) when unset.
func websocketWriteTimeout(cfg *config.Config) time.Duration {
	return time.Duration(cfg.Testing.WebsocketWriteTimeoutMS) * time.Millisecond
}

// activityMergeWindow is testing.activity_merge_window_s, or zero (the
// queue's default, a minute) when unset.
func activityMergeWindow(cfg *config.Config) time.Duration {
	return time.Duration(cfg.Testing.ActivityMergeWindowS) * time.Second
}
