package e2e

import (
	"testing"
	"time"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// TestSyncAppliesNewLimits (issue 37): new limits from the panel reach a
// running server. Docker changes them in place; Podman 4.3 has no update
// route, so the console says they apply at the next start (before: the
// engine's 404 read as "no such container" and nothing said), and the
// container created at that start has them.
func TestSyncAppliesNewLimits(t *testing.T) {
	parallelDocker(t)
	s := newGameServer(t)
	s.Settings["build"] = map[string]any{"memory_limit": 128, "swap": 0, "cpu_limit": 100, "disk_space": 0}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	n.power(s.UUID, "start")
	n.waitState(s.UUID, "running", 60*time.Second)

	n.Panel.UpdateSettings(s.UUID, "build", map[string]any{"memory_limit": 192, "swap": 0, "cpu_limit": 100, "disk_space": 0})
	if res, body := n.request("POST", "/api/servers/"+s.UUID+"/sync", nil, ""); res.StatusCode != 204 {
		t.Fatalf("sync: %d %s", res.StatusCode, body)
	}
	cli := testimages.Client(t)
	// memory is the container's limit; -1 while it does not exist (the
	// restart removes it and creates it anew).
	memory := func() int64 {
		info, err := engineInspect(t.Context(), cli, s.UUID)
		if err != nil || info.HostConfig == nil {
			return -1
		}
		return info.HostConfig.Memory
	}
	if !testimages.Podman() {
		if !wait.Until(30*time.Second, func() bool { return memory() > 192<<20 }) {
			t.Fatalf("memory limit after sync: %d, want above 192 MiB (with the overhead)", memory())
		}
		return
	}
	n.waitLog(s.UUID, "apply when the server next starts")
	if m := memory(); m < 0 || m >= 192<<20 {
		t.Fatalf("Podman changed the limit live (%d): the notice is wrong", m)
	}
	n.power(s.UUID, "restart")
	if !wait.Until(90*time.Second, func() bool { return memory() >= 192<<20 }) {
		t.Fatalf("memory limit after the restart: %d, want 192 MiB or more", memory())
	}
	n.waitState(s.UUID, "running", 60*time.Second)
}
