package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
)

// kill -9 of the daemon while a server runs, then a restart: the same
// container is re-attached (never re-created or restarted), with console and
// stats working.
func TestRestartKill9Reattaches(t *testing.T) {
	s := newGameServer(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	n.power(s.UUID, "start")
	n.waitState(s.UUID, "running", 60*time.Second)
	cli := testimages.Client(t)
	before, err := cli.ContainerInspect(context.Background(), s.UUID)
	if err != nil {
		t.Fatal(err)
	}

	n.kill9()
	n.restart()

	if st := n.details(s.UUID)["state"]; st != "running" {
		t.Fatalf("state after restart: %v", st)
	}
	after, err := cli.ContainerInspect(context.Background(), s.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if after.ID != before.ID || after.State.StartedAt != before.State.StartedAt {
		t.Fatalf("container re-created or restarted: %s@%s -> %s@%s", before.ID, before.State.StartedAt, after.ID, after.State.StartedAt)
	}
	n.waitLog(s.UUID, "Done (") // the ring was filled from the container log
	n.command(s.UUID, "echo back-after-kill-9")
	n.waitLog(s.UUID, "back-after-kill-9")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		u := n.details(s.UUID)["utilization"].(map[string]any)
		if u["memory_bytes"].(float64) > 0 && u["uptime"].(float64) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stats after re-attach: %v", u)
		}
	}
	n.power(s.UUID, "stop")
	n.waitState(s.UUID, "offline", 60*time.Second)
}

// A host reboot: the container stopped while the daemon was down, and the
// saved state says running: the server is started again.
func TestRestartAfterHostRebootStartsServer(t *testing.T) {
	s := newGameServer(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	n.power(s.UUID, "start")
	n.waitState(s.UUID, "running", 60*time.Second)
	n.kill9()
	cli := testimages.Client(t)
	if err := cli.ContainerKill(context.Background(), s.UUID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	n.restart()
	n.waitState(s.UUID, "running", 60*time.Second)
	n.waitLog(s.UUID, "Done (")
	n.power(s.UUID, "kill")
	n.waitState(s.UUID, "offline", 60*time.Second)
}
