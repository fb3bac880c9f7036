package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// newGameServer is a test server with a fresh UUID whose container is
// removed when the test ends.
func newGameServer(t *testing.T) devpanel.Server {
	t.Helper()
	testimages.RequireDocker(t)
	testimages.GameServer(context.Background(), t)
	s := gameServer(uuid.NewString())
	removeContainersAtCleanup(t, s.UUID)
	return s
}

func removeContainersAtCleanup(t *testing.T, id string) {
	cli := testimages.Client(t)
	t.Cleanup(func() {
		for _, name := range []string{id, id + "_installer"} {
			_, _ = cli.ContainerRemove(context.Background(), name, containerRemoveForce)
		}
	})
}

func (n *node) power(id, action string) {
	n.t.Helper()
	res, body := n.request("POST", "/api/servers/"+id+"/power", map[string]any{"action": action}, "")
	if res.StatusCode != 202 {
		n.t.Fatalf("power %s: %d %s", action, res.StatusCode, body)
	}
}

func (n *node) command(id string, cmds ...string) {
	n.t.Helper()
	res, body := n.request("POST", "/api/servers/"+id+"/commands", map[string]any{"commands": cmds}, "")
	if res.StatusCode != 204 {
		n.t.Fatalf("commands %v: %d %s", cmds, res.StatusCode, body)
	}
}

// waitLog waits until a console line (of the last 100) contains substr.
func (n *node) waitLog(id, substr string) []string {
	n.t.Helper()
	var lines []string
	if !wait.Until(30*time.Second, func() bool {
		lines = n.logs(id)
		return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, substr) })
	}) {
		n.t.Fatalf("console never showed %q:\n%s\n\ndaemon log:\n%s", substr, strings.Join(lines, "\n"), n.log)
	}
	return lines
}

var containerRemoveForce = client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}

// engineInspect asks the engine directly about a container (the client's
// result wrapped around it dropped).
func engineInspect(ctx context.Context, cli *client.Client, name string) (container.InspectResponse, error) {
	res, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	return res.Container, err
}

// processNamespace makes the tests' named servers unique to this test
// process: containers are named after their server on the one engine every
// suite shares, and two suites running at once (two make test, a CI run
// beside a developer's) must not drive each other's containers (issue 38
// §5). Generated once, read only.
var processNamespace = uuid.New()

// processID is the server UUID a test names label (a readable fixed UUID)
// in this test process.
func processID(label string) string {
	return uuid.NewSHA1(processNamespace, []byte(label)).String()
}

// engineWide holds, until the test ends, a lock that every test process of
// this machine takes for the engine-wide operation name: an image prune
// removes every dangling image, another suite's too, so two suites must
// not interleave their prune tests (issue 38 §5).
func engineWide(t *testing.T, name string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "wharf-e2e-engine-"+name+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}
