package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
)

const quotasOffLine = "system.quotas is enabled but kernel disk quotas are off"

// system.quotas on a data directory whose filesystem has no project
// quotas (the test's temporary directory): the daemon boots, says so in
// one warning line with the reason, and holds the disk limit as without
// the key. (The limit itself on a quota-capable filesystem is tested in
// internal/quota and internal/server on a loop-mounted ext4 image.)
func TestQuotasWithoutKernelSupportSayWhyAndChangeNothing(t *testing.T) {
	// The containers are started below: none from an earlier run may be
	// found running at boot.
	for _, id := range []string{filesServer, siblingServer} {
		removeContainersNow(t, id)
		removeContainersAtCleanup(t, id)
	}
	s := exampleServer(filesServer)
	s.Settings["build"] = map[string]any{"memory_limit": 128, "disk_space": 1}
	n := startNode(t, nodeOptions{
		servers: []devpanel.Server{s},
		mutate:  func(c *config.Config) { c.System.Quotas.Enabled = true },
	})
	if got := strings.Count(n.log.String(), quotasOffLine); got != 1 {
		t.Fatalf("the log says %d times %q, want once:\n%s", got, quotasOffLine, n.log)
	}
	for _, line := range strings.Split(n.log.String(), "\n") {
		if strings.Contains(line, quotasOffLine) && !strings.Contains(line, "error=") {
			t.Errorf("the line does not say why: %s", line)
		}
	}
	// The daemon's own limit still holds: 2 MiB through the file manager
	// into a 1 MiB server is refused.
	res, body := n.files("POST", "write?file="+q("/big.bin"), strings.Repeat("x", 2<<20))
	if res.StatusCode == http.StatusNoContent || res.StatusCode == http.StatusOK {
		t.Errorf("a 2 MiB write into a 1 MiB server answered %d %s", res.StatusCode, body)
	}
	n.assertAnswersEveryFace(t, filesServer)
	// The container runs under the seccomp profile that refuses the
	// project-id ioctls (what it refuses: internal/runtime/docker's
	// TestQuotaLockedContainerCannotChangeProjectID).
	n.startRunning(s)
	if !hasQuotaSeccomp(inspectContainer(t, s.UUID).HostConfig.SecurityOpt) {
		t.Error("the server's container has no quota seccomp profile")
	}

	// Control: without the key, no such line, and the engine's own profile.
	sibling := exampleServer(siblingServer)
	quiet := startNode(t, nodeOptions{servers: []devpanel.Server{sibling}})
	if strings.Contains(quiet.log.String(), quotasOffLine) {
		t.Errorf("a node without system.quotas logs %q", quotasOffLine)
	}
	quiet.startRunning(sibling)
	if opts := inspectContainer(t, sibling.UUID).HostConfig.SecurityOpt; hasQuotaSeccomp(opts) {
		t.Errorf("without system.quotas the container has a seccomp profile of Wharf's: %.200q", opts)
	}
}

func removeContainersNow(t *testing.T, id string) {
	cli := testimages.Client(t)
	for _, name := range []string{id, id + "_installer"} {
		_, _ = cli.ContainerRemove(context.Background(), name, containerRemoveForce)
	}
}

func hasQuotaSeccomp(securityOpt []string) bool {
	for _, o := range securityOpt {
		// 0x401c5820 (FS_IOC_FSSETXATTR) as the JSON profile writes it.
		if strings.HasPrefix(o, "seccomp=") && strings.Contains(o, `"valueTwo":1075599392`) {
			return true
		}
	}
	return false
}
