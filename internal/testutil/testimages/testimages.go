// Package testimages builds the Docker images that Docker tests run: a
// FROM-scratch static busybox and the fake game server of
// internal/testutil/gameserver. The building itself lives in
// internal/devimage (dev mode uses it too); this package adapts it to tests:
// failures fail the test, and no Docker engine is a failure, never a skip.
//
// Usage from any package's tests:
//
//	testimages.RequireDocker(t)
//	img := testimages.GameServer(ctx, t) // "wharf-test/gameserver:latest"
//
// The images are deliberately left in place after the tests (they are
// reused); everything else a test creates must be removed by that test.
package testimages

import (
	"context"
	"os"
	"testing"

	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/devimage"
)

const (
	// BusyboxTag is the tag of the image Busybox builds.
	BusyboxTag = "wharf-test/busybox:latest"
	// GameServerTag is the tag of the image GameServer builds.
	GameServerTag = "wharf-test/gameserver:latest"
	// GameServerPath is the game server binary's path inside its image
	// (also the image's entrypoint).
	GameServerPath = devimage.GameServerPath

	noDockerMessage = "no Docker engine reachable: start dockerd; make test never skips Docker tests"

	// RequireDockerEnv, set to 1 (make test and CI do), makes a missing
	// engine fail the tests that need one; otherwise they are skipped, so
	// that the tests without containers run anywhere.
	RequireDockerEnv = "WHARF_REQUIRE_DOCKER"
)

// Client returns a Docker client (environment settings, API version
// negotiated) that is closed when the test ends. When no engine answers it
// skips the test, or fails it when WHARF_REQUIRE_DOCKER=1.
func Client(tb testing.TB) *client.Client {
	tb.Helper()
	cli, err := devimage.NewClient(context.Background(), "")
	if err != nil {
		if os.Getenv(RequireDockerEnv) == "1" {
			tb.Fatalf("%s (%v)", noDockerMessage, err)
		}
		tb.Skipf("needs a Docker engine, none reachable (%v); %s=1 makes this a failure", err, RequireDockerEnv)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// RequireDocker skips the test (fails it when WHARF_REQUIRE_DOCKER=1) when
// no Docker engine answers.
func RequireDocker(tb testing.TB) {
	tb.Helper()
	Client(tb)
}

// Busybox builds (once) an image FROM scratch holding the host's static
// /bin/busybox with its applet links in /bin, and returns its tag.
func Busybox(ctx context.Context, tb testing.TB) string {
	tb.Helper()
	if err := devimage.Busybox(ctx, Client(tb), BusyboxTag); err != nil {
		tb.Fatal(err)
	}
	return BusyboxTag
}

// GameServer builds (once) an image FROM scratch with the fake game server
// (internal/testutil/gameserver, compiled statically) as its entrypoint,
// busybox for a shell, and /home/container as the working directory, and
// returns its tag.
func GameServer(ctx context.Context, tb testing.TB) string {
	tb.Helper()
	if err := devimage.GameServer(ctx, Client(tb), GameServerTag); err != nil {
		tb.Fatal(err)
	}
	return GameServerTag
}
