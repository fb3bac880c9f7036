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
	"strings"
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

	// EngineEnv names the engine the tests run against (issue 37):
	// "docker" (or unset) or "podman". With "podman", DOCKER_HOST must
	// name Podman's Docker-compatible socket, and a test whose engine
	// answers as another one fails: a Podman job never tests Docker by
	// mistake.
	EngineEnv = "WHARF_TEST_ENGINE"
)

// Podman reports whether the tests run against Podman (WHARF_TEST_ENGINE).
func Podman() bool { return os.Getenv(EngineEnv) == "podman" }

// PodmanNetwork is the node network the tests use on Podman: its own
// name, bridge and subnets, so that a Podman beside Docker (this CI) never
// takes Docker's bridge (Wharf's default service0) or its subnets.
type PodmanNetwork struct{ Name, Bridge, V4, Gate4, V6, Gate6 string }

// TestPodmanNetwork returns that network.
func TestPodmanNetwork() PodmanNetwork {
	return PodmanNetwork{
		Name: "wharf_podman_nw", Bridge: "wharfpod0",
		V4: "10.231.0.0/16", Gate4: "10.231.0.1",
		V6: "fd57:6861:7266::/64", Gate6: "fd57:6861:7266::1",
	}
}

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
	checkEngine(tb, cli)
	return cli
}

// checkEngine fails the test when the engine is not the one EngineEnv
// names.
func checkEngine(tb testing.TB, cli *client.Client) {
	tb.Helper()
	v, err := cli.ServerVersion(context.Background(), client.ServerVersionOptions{})
	if err != nil {
		tb.Fatalf("engine version: %v", err)
	}
	podman := false
	for _, c := range v.Components {
		podman = podman || strings.HasPrefix(strings.ToLower(c.Name), "podman")
	}
	if podman != Podman() {
		tb.Fatalf("%s=%q but the engine at %s is %s", EngineEnv, os.Getenv(EngineEnv), cli.DaemonHost(), map[bool]string{true: "Podman", false: "Docker"}[podman])
	}
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
