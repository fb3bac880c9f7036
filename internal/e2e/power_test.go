package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

func gameServer(uuid string) devpanel.Server {
	return devpanel.Server{
		UUID: uuid,
		Settings: map[string]any{
			"uuid": uuid, "suspended": false, "invocation": "gameserver",
			"environment": map[string]any{"MAX_PLAYERS": 20, "RATIO": 1.5, "MOTD": "hi"},
			"build":       map[string]any{"memory_limit": 128, "swap": 0, "cpu_limit": 100, "disk_space": 0},
			"container":   map[string]any{"image": "~wharf-test/gameserver:latest"},
		},
		ProcessConfiguration: map[string]any{
			"startup": map[string]any{"done": []string{"Done ("}},
			"stop":    map[string]any{"type": "command", "value": "stop"},
		},
	}
}

func (n *node) details(uuid string) map[string]any {
	n.t.Helper()
	res, body := n.request("GET", "/api/servers/"+uuid, nil, "")
	if res.StatusCode != 200 {
		n.t.Fatalf("details: %d %s", res.StatusCode, body)
	}
	var d map[string]any
	if err := json.Unmarshal(body, &d); err != nil {
		n.t.Fatal(err)
	}
	return d
}

func (n *node) waitState(uuid, want string, timeout time.Duration) {
	n.t.Helper()
	if wait.Until(timeout, func() bool { return n.details(uuid)["state"] == want }) {
		return
	}
	n.t.Fatalf("server did not reach %s within %s (state %v)\n%s", want, timeout, n.details(uuid)["state"], n.log)
}

func (n *node) logs(uuid string) []string {
	n.t.Helper()
	_, body := n.request("GET", "/api/servers/"+uuid+"/logs?size=100", nil, "")
	var l struct{ Data []string }
	if err := json.Unmarshal(body, &l); err != nil {
		n.t.Fatalf("logs: %v %s", err, body)
	}
	return l.Data
}

func TestPowerStartCommandStop(t *testing.T) {
	testimages.RequireDocker(t)
	testimages.GameServer(context.Background(), t)
	id := processID("2b4c6d8e-0a1b-4c3d-8e5f-7a9b1c3d5e7f")
	removeContainersAtCleanup(t, id)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{gameServer(id)}})

	res, body := n.request("POST", "/api/servers/"+id+"/power", map[string]any{"action": "start"}, "")
	if res.StatusCode != 202 || len(body) != 0 {
		t.Fatalf("start: %d %q", res.StatusCode, body)
	}
	n.waitState(id, "running", 60*time.Second)

	res, _ = n.request("POST", "/api/servers/"+id+"/commands", map[string]any{"commands": []string{"echo hello-wharf", "env"}}, "")
	if res.StatusCode != 204 {
		t.Fatalf("commands: %d", res.StatusCode)
	}
	var joined string
	if !wait.Until(10*time.Second, func() bool {
		joined = strings.Join(n.logs(id), "\n")
		return strings.Contains(joined, "hello-wharf") && strings.Contains(joined, "MAX_PLAYERS=20")
	}) {
		t.Fatalf("console never showed the command output:\n%s", joined)
	}
	if !strings.Contains(joined, "RATIO=1.5") || strings.Contains(joined, "20.000000") || !strings.Contains(joined, "SERVER_MEMORY=128") {
		t.Fatalf("environment rendered wrongly:\n%s", joined)
	}

	res, _ = n.request("POST", "/api/servers/"+id+"/power", map[string]any{"action": "stop"}, "")
	if res.StatusCode != 202 {
		t.Fatalf("stop: %d", res.StatusCode)
	}
	n.waitState(id, "offline", 60*time.Second)
	d := n.details(id)
	u := d["utilization"].(map[string]any)
	if u["memory_bytes"] != float64(0) || u["uptime"] != float64(0) || u["memory_limit_bytes"] == float64(0) {
		t.Fatalf("utilization after stop = %v", u)
	}

	if res, _ := n.request("POST", "/api/servers/"+id+"/commands", map[string]any{"commands": []string{"x"}}, ""); res.StatusCode != 502 {
		t.Fatalf("command to a stopped server: %d, want 502", res.StatusCode)
	}
	for _, bad := range []map[string]any{{"action": "jump"}, {"action": "start", "wait_seconds": 301}, {"action": "start", "wait_seconds": -1}} {
		if res, _ := n.request("POST", "/api/servers/"+id+"/power", bad, ""); res.StatusCode != 422 {
			t.Fatalf("power %v: %d, want 422", bad, res.StatusCode)
		}
	}
}

// A stop the game server ignores, a start queued behind it (wait_seconds 60,
// then none: 30), then a kill: the kill ends the stop, and the queued start
// runs once the server is offline and ends in running, as with Wings. A
// queued start whose wait runs out says why on the console.
func TestPowerQueuedStartSurvivesAKill(t *testing.T) {
	parallelDocker(t)
	s := newGameServer(t)
	s.ProcessConfiguration["stop"] = map[string]any{"type": "command", "value": "ignored-stop"}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	n.power(s.UUID, "start")
	n.waitState(s.UUID, "running", 60*time.Second)
	for _, start := range []map[string]any{{"action": "start", "wait_seconds": 60}, {"action": "start"}} {
		n.power(s.UUID, "stop")
		n.waitState(s.UUID, "stopping", 30*time.Second)
		n.waitLog(s.UUID, "Unknown command: ignored-stop")
		if res, body := n.request("POST", "/api/servers/"+s.UUID+"/power", start, ""); res.StatusCode != 202 {
			t.Fatalf("queued start %v: %d %s", start, res.StatusCode, body)
		}
		n.power(s.UUID, "kill")
		n.waitState(s.UUID, "running", 60*time.Second)
		if lines := strings.Join(n.logs(s.UUID), "\n"); strings.Contains(lines, "Power action") {
			t.Fatalf("a power action was reported on the console:\n%s", lines)
		}
	}

	n.power(s.UUID, "stop")
	n.waitState(s.UUID, "stopping", 30*time.Second)
	if res, body := n.request("POST", "/api/servers/"+s.UUID+"/power", map[string]any{"action": "start", "wait_seconds": 1}, ""); res.StatusCode != 202 {
		t.Fatalf("queued start: %d %s", res.StatusCode, body)
	}
	n.waitLog(s.UUID, "Power action start was not run: timed out waiting for the power lock.")
	n.power(s.UUID, "kill")
	n.waitState(s.UUID, "offline", 60*time.Second)
}
