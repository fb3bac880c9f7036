package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/tree"
	"github.com/wharf/wharf/internal/testutil/wait"
	"github.com/wharf/wharf/internal/tokens"
)

// transferJWT is what the panel mints for a transfer: signed with the
// TARGET node's token, the server in `sub`.
func (c *cluster) transferJWT(id string) string {
	c.Target.t.Helper()
	tok, err := tokens.Sign([]byte(c.Target.Token), map[string]any{
		"sub": id, "iat": time.Now().Unix(), "nbf": time.Now().Add(-5 * time.Minute).Unix(),
		"exp": time.Now().Add(10 * time.Minute).Unix(), "unique_id": "u-" + id[:8],
	})
	if err != nil {
		c.Target.t.Fatal(err)
	}
	return tok
}

func (c *cluster) startTransfer(id string) {
	c.Source.t.Helper()
	res, body := c.Source.request("POST", "/api/servers/"+id+"/transfer",
		map[string]any{"url": c.Target.URL + "/api/transfers", "token": "Bearer " + c.transferJWT(id)}, "")
	if res.StatusCode != 202 {
		c.Source.t.Fatalf("start transfer: %d %s", res.StatusCode, body)
	}
}

// waitDaemonLog waits until the daemon's own log matches re.
func (n *node) waitDaemonLog(re string, timeout time.Duration) {
	n.t.Helper()
	rx := regexp.MustCompile(re)
	wait.For(n.t, timeout, func() bool { return rx.MatchString(n.log.String()) }, "the log to match %q\n%s", re, n.log)
}

// statuses returns the transfer statuses the node published for id, in order.
func (n *node) statuses(id string) []string {
	rx := regexp.MustCompile(`msg="transfer status" server=` + id + ` direction=\w+ status=(\w+)`)
	var out []string
	for _, m := range rx.FindAllStringSubmatch(n.log.String(), -1) {
		out = append(out, m[1])
	}
	return out
}

func (c *cluster) waitReports(n *node, id string, want []string, timeout time.Duration) {
	n.t.Helper()
	if !wait.Until(timeout, func() bool { return slices.Equal(c.reports(n, id), want) }) {
		n.t.Fatalf("reports %v, want %v\nSOURCE:\n%s\nTARGET:\n%s", c.reports(n, id), want, c.Source.log, c.Target.log)
	}
}

// assertUsable: the server is on the node and power actions are accepted
// (no transferring flag left).
func (n *node) assertUsable(id string) {
	n.t.Helper()
	res, body := n.request("POST", "/api/servers/"+id+"/power", map[string]any{"action": "stop"}, "")
	if res.StatusCode != 202 {
		n.t.Fatalf("power stop on %s: %d %s", id, res.StatusCode, body)
	}
}

// assertGone: the node has neither the server nor its files.
func (n *node) assertGone(id string) {
	n.t.Helper()
	var code int
	var err error
	// The deadline is a backstop: on a machine busy with other suites the
	// target took more than 15 s to notice the dead source and clean up.
	if !wait.Until(60*time.Second, func() bool {
		res, _ := n.request("GET", "/api/servers/"+id, nil, "")
		code = res.StatusCode
		_, err = os.Lstat(n.dataDir(id))
		return code == 404 && os.IsNotExist(err)
	}) {
		n.t.Fatalf("server still on the node after 60 s: GET %d, files: %v\n%s", code, err, n.log)
	}
}

func transferServer(t *testing.T, id string) devpanel.Server {
	testimages.RequireDocker(t)
	testimages.GameServer(context.Background(), t)
	t.Cleanup(func() {
		_, _ = testimages.Client(t).ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
	})
	return gameServer(id)
}

// throttled makes the target extract at most 1 MiB/s.
func throttled(name string, c *config.Config) {
	if name == "target" {
		c.System.Transfers.DownloadLimit = 1
	}
}

func fill(t *testing.T, n *node, id string, size int64) {
	t.Helper()
	// Empty the directory in place: the daemon holds it open as the sandbox root.
	entries, err := os.ReadDir(n.dataDir(id))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(n.dataDir(id), e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := tree.Build(n.dataDir(id), size); err != nil {
		t.Fatal(err)
	}
}

func snap(t *testing.T, dir string) map[string]string {
	t.Helper()
	s, err := tree.Snapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTransferArrivesIdentical(t *testing.T) {
	id := processID("7a000001-0000-4000-8000-000000000001")
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, nil)
	fill(t, c.Source, id, 8<<20)
	want := snap(t, c.Source.dataDir(id))
	// A running server is stopped, and its container removed, before it is
	// sent: both nodes share this Docker engine, and the target's container
	// takes the same name.
	c.Source.power(id, "start")
	c.Source.waitLog(id, "Done (")

	c.startTransfer(id)
	c.waitReports(c.Target, id, []string{"success"}, 60*time.Second)
	c.Source.waitDaemonLog(`server=`+id+` direction=outgoing status=completed`, 30*time.Second)

	if diff := cmp.Diff(want, snap(t, c.Target.dataDir(id))); diff != "" {
		t.Fatalf("tree differs (-source +target):\n%s", diff)
	}
	if res, body := c.Target.request("GET", "/api/servers/"+id, nil, ""); res.StatusCode != 200 {
		t.Fatalf("target GET: %d %s", res.StatusCode, body)
	}
	ci, err := engineInspect(context.Background(), testimages.Client(t), id)
	if err != nil || !strings.Contains(strings.Join(ci.Config.Env, " "), "MAX_PLAYERS=20") || ci.Config.Labels["NodeUUID"] != c.Target.Config.UUID {
		t.Fatalf("target container: %v", err)
	}
	if got := c.reports(c.Source, id); len(got) != 0 {
		t.Fatalf("the source reported %v (only the target reports success)", got)
	}
	if got, want := c.Source.statuses(id), []string{"pending", "processing", "completed"}; !slices.Equal(got, want) {
		t.Fatalf("source statuses %v, want %v", got, want)
	}
	if got, want := c.Target.statuses(id), []string{"pending", "processing", "completed"}; !slices.Equal(got, want) {
		t.Fatalf("target statuses %v, want %v", got, want)
	}
	// The moved server is usable on the target; on the source it stays
	// locked until the panel deletes it there.
	c.Target.assertUsable(id)
	if res, _ := c.Source.request("POST", "/api/servers/"+id+"/power", map[string]any{"action": "start"}, ""); res.StatusCode != 409 {
		t.Fatalf("start on the source after the move: %d, want 409", res.StatusCode)
	}
	// The panel now assigns the server to the target: a restarted target
	// keeps it.
	c.assign[c.Source].set(id, false)
	c.assign[c.Target].set(id, true)
	c.Target.kill9()
	c.Target.restart()
	if diff := cmp.Diff(want, snap(t, c.Target.dataDir(id))); diff != "" {
		t.Fatalf("tree differs after the target restarted (-source +target):\n%s", diff)
	}
	c.Target.assertUsable(id)

	// The panel then deletes the server on the source. The source forgets
	// it and its files but leaves the target's container (same engine, same
	// name) alone, and the server keeps running on the target.
	c.Target.power(id, "start")
	c.Target.waitLog(id, "Done (")
	running, err := engineInspect(context.Background(), testimages.Client(t), id)
	if err != nil || running.Config.Labels["NodeUUID"] != c.Target.Config.UUID {
		t.Fatalf("the target's container after a start: %v", err)
	}
	if res, body := c.Source.request("DELETE", "/api/servers/"+id, nil, ""); res.StatusCode != 204 {
		t.Fatalf("delete on the source: %d %s", res.StatusCode, body)
	}
	c.Source.assertGone(id)
	c.Source.waitDaemonLog(`level=WARN msg="leaving the container alone: it belongs to another node" server=`+id+` container=`+id+` node=`+c.Target.Config.UUID, 10*time.Second)
	after, err := engineInspect(context.Background(), testimages.Client(t), id)
	if err != nil || after.ID != running.ID || after.State == nil || !after.State.Running {
		t.Fatalf("the target's container after the delete on the source: %v", err)
	}
	c.Target.waitState(id, "running", 10*time.Second)
	c.Target.command(id, "echo still here")
	c.Target.waitLog(id, "still here")

	logs := c.Source.log.String()
	for _, m := range []string{"Preparing to stream server data to destination...", "Streaming archive to destination...", "Finished streaming archive to destination."} {
		if !strings.Contains(logs, m) {
			t.Errorf("source log lacks %q", m)
		}
	}
	if strings.Contains(logs, c.transferJWT(id)[:40]) || strings.Contains(c.Target.log.String(), "eyJ") {
		t.Error("a token reached a log")
	}
}

// A throttled transfer: progress every 5 s (the default interval), power
// actions refused on the source, the server queryable on the target while
// it streams, and a second transfer of the same server refused.
func TestTransferProgressEvery5sAndLocks(t *testing.T) {
	id := processID("7a000002-0000-4000-8000-000000000002")
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, throttled)
	fill(t, c.Source, id, 13<<20)
	c.startTransfer(id)
	c.Source.waitDaemonLog(`server=`+id+` direction=outgoing status=processing`, 20*time.Second)
	c.Target.waitDaemonLog(`server=`+id+` direction=incoming status=processing`, 20*time.Second)

	for _, a := range []string{"start", "stop", "restart"} {
		res, body := c.Source.request("POST", "/api/servers/"+id+"/power", map[string]any{"action": a}, "")
		if res.StatusCode != 409 || !strings.Contains(string(body), "transferred") {
			t.Fatalf("power %s while transferring: %d %s", a, res.StatusCode, body)
		}
	}
	if res, body := c.Source.request("POST", "/api/servers/"+id+"/transfer", map[string]any{"url": c.Target.URL + "/api/transfers", "token": "x"}, ""); res.StatusCode != 409 {
		t.Fatalf("second outgoing transfer: %d %s", res.StatusCode, body)
	}
	if res, body := c.Target.request("GET", "/api/servers/"+id, nil, ""); res.StatusCode != 200 {
		t.Fatalf("target GET while streaming: %d %s", res.StatusCode, body)
	}
	res, body := c.Target.request("POST", "/api/transfers", "", "Bearer "+c.transferJWT(id))
	assertJSONError(t, res, body, 409)

	c.waitReports(c.Target, id, []string{"success"}, 60*time.Second)
	c.Source.waitDaemonLog(`direction=outgoing status=completed`, 10*time.Second)

	rx := regexp.MustCompile(`time=(\S+) level=INFO msg="transfer log" server=` + id + ` direction=outgoing message="[^"]*Uploading \[`)
	var at []time.Time
	for _, m := range rx.FindAllStringSubmatch(c.Source.log.String(), -1) {
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatal(err)
		}
		at = append(at, ts)
	}
	if len(at) < 3 {
		t.Fatalf("%d progress messages for a ~13 s transfer\n%s", len(at), c.Source.log)
	}
	for i := 1; i < len(at)-1; i++ { // the last one is the final 100% message
		if d := at[i].Sub(at[i-1]); d < 4500*time.Millisecond || d > 5500*time.Millisecond {
			t.Errorf("progress messages %s apart", d)
		}
	}
	// The total is the disk usage: allocated blocks, at least 4 KiB per entry (docs/security.md).
	if !regexp.MustCompile(`Uploading \[=+>? *\] [0-9.]+ MiB / 13\.[0-9] MiB`).MatchString(c.Source.log.String()) {
		t.Errorf("no progress against the disk usage in\n%s", c.Source.log)
	}
}

// A proxy between the nodes alters one byte of the checksum field.
func TestTransferChecksumMismatch(t *testing.T) {
	id := processID("7a000003-0000-4000-8000-000000000003")
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, nil)
	fill(t, c.Source, id, 1<<20)
	proxy := alteringProxy(t, c.Target.URL)
	res, body := c.Source.request("POST", "/api/servers/"+id+"/transfer",
		map[string]any{"url": proxy + "/api/transfers", "token": "Bearer " + c.transferJWT(id)}, "")
	if res.StatusCode != 202 {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	c.waitReports(c.Source, id, []string{"failure"}, 30*time.Second)
	c.waitReports(c.Target, id, []string{"failure"}, 30*time.Second)
	c.Source.waitDaemonLog(`direction=outgoing status=failed`, 10*time.Second)
	c.Source.waitDaemonLog(`unexpected status code from destination: 400`, 10*time.Second)
	c.Target.waitDaemonLog(`checksums don't match`, 10*time.Second)
	c.Target.assertGone(id)
	c.Source.assertUsable(id)
	if _, err := engineInspect(context.Background(), testimages.Client(t), id); err == nil {
		t.Fatal("a container was created for a refused transfer")
	}
}

func TestTransferCancelOnSource(t *testing.T) {
	id := processID("7a000004-0000-4000-8000-000000000004")
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, throttled)
	fill(t, c.Source, id, 16<<20)
	c.startTransfer(id)
	c.Target.waitDaemonLog(`server=`+id+` direction=incoming status=processing`, 20*time.Second)
	res, body := c.Source.request("DELETE", "/api/servers/"+id+"/transfer", nil, "")
	if res.StatusCode != 202 {
		t.Fatalf("cancel: %d %s", res.StatusCode, body)
	}
	res, body = c.Source.request("DELETE", "/api/servers/"+id+"/transfer", nil, "")
	assertJSONError(t, res, body, 409)
	c.Source.waitDaemonLog(`direction=outgoing status=cancelled`, 20*time.Second)
	c.waitReports(c.Source, id, []string{"failure"}, 20*time.Second)
	c.waitReports(c.Target, id, []string{"failure"}, 20*time.Second)
	if got, want := c.Source.statuses(id), []string{"pending", "processing", "cancelling", "cancelled"}; !slices.Equal(got, want) {
		t.Fatalf("source statuses %v, want %v", got, want)
	}
	c.Target.assertGone(id)
	c.Source.assertUsable(id)
}

func TestTransferCancelOnTarget(t *testing.T) {
	id := processID("7a000005-0000-4000-8000-000000000005")
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, throttled)
	fill(t, c.Source, id, 16<<20)
	c.startTransfer(id)
	c.Target.waitDaemonLog(`server=`+id+` direction=incoming status=processing`, 20*time.Second)
	res, body := c.Target.request("DELETE", "/api/transfers/"+id, nil, "")
	if res.StatusCode != 202 {
		t.Fatalf("cancel: %d %s", res.StatusCode, body)
	}
	res, body = c.Target.request("DELETE", "/api/transfers/"+id, nil, "")
	assertJSONError(t, res, body, 409)
	c.Target.waitDaemonLog(`direction=incoming status=cancelled`, 20*time.Second)
	c.waitReports(c.Target, id, []string{"failure"}, 20*time.Second)
	c.waitReports(c.Source, id, []string{"failure"}, 20*time.Second)
	c.Source.waitDaemonLog(`direction=outgoing status=failed`, 20*time.Second)
	if got, want := c.Target.statuses(id), []string{"pending", "processing", "cancelling", "cancelled"}; !slices.Equal(got, want) {
		t.Fatalf("target statuses %v, want %v", got, want)
	}
	c.Target.assertGone(id)
	c.Source.assertUsable(id)
}

func TestTransferCancelWhenNotTransferring(t *testing.T) {
	id := processID("7a000006-0000-4000-8000-000000000006")
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, nil)
	res, body := c.Source.request("DELETE", "/api/servers/"+id+"/transfer", nil, "")
	assertJSONError(t, res, body, 409)
	res, body = c.Source.request("DELETE", "/api/transfers/"+id, nil, "")
	assertJSONError(t, res, body, 409)
	res, body = c.Target.request("DELETE", "/api/transfers/"+id, nil, "")
	assertJSONError(t, res, body, 409)
	if res, _ := c.Target.request("DELETE", "/api/transfers/"+id, nil, "-"); res.StatusCode != 401 {
		t.Fatalf("incoming cancel without the node token: %d", res.StatusCode)
	}
	for _, b := range []map[string]any{{"url": c.Target.URL}, {"token": "x"}, {"url": "ftp://x", "token": "x"}} {
		if res, body := c.Source.request("POST", "/api/servers/"+id+"/transfer", b, ""); res.StatusCode != 422 {
			t.Fatalf("start with %v: %d %s", b, res.StatusCode, body)
		}
	}
}

func TestTransferRefusesOtherTokens(t *testing.T) {
	id := processID("7a000007-0000-4000-8000-000000000007")
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, nil)
	exp := time.Now().Add(10 * time.Minute).Unix()
	ws := c.Target.signURL(map[string]any{"user_uuid": "0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6", "server_uuid": id, "permissions": []string{"*"}, "jti": "j", "iat": time.Now().Unix(), "exp": exp})
	dl := c.Target.signURL(map[string]any{"file_path": "/a", "server_uuid": id, "unique_id": "u1", "exp": exp})
	foreign, _ := tokens.Sign([]byte("another-node-token"), map[string]any{"sub": id, "exp": exp})
	for name, auth := range map[string]string{
		"websocket token": "Bearer " + ws, "download token": "Bearer " + dl, "other key": "Bearer " + foreign,
		"node token": "Bearer " + c.Target.Token, "none": "-", "not bearer": "Basic " + c.transferJWT(id),
	} {
		res, body := c.Target.request("POST", "/api/transfers", "", auth)
		assertJSONError(t, res, body, 401)
		if name == "none" && res.Header.Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("no WWW-Authenticate on a missing header")
		}
	}
	c.Target.assertGone(id)
	if got := c.reports(c.Target, id); len(got) != 0 {
		t.Fatalf("refused tokens reached the panel: %v", got)
	}
}

// kill -9 of the target mid-transfer: the source reports the failure and
// the server is usable there again; the restarted target removes what it
// had received.
func TestTransferTargetKilled(t *testing.T) {
	t.Parallel() // own server UUID and nodes; mostly a throttled wait
	id := processID("7a000008-0000-4000-8000-000000000008")
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, throttled)
	fill(t, c.Source, id, 16<<20)
	c.startTransfer(id)
	c.Target.waitDaemonLog(`server=`+id+` direction=incoming status=processing`, 20*time.Second)
	// The point: the kill lands some way into the transfer, not at its first byte.
	time.Sleep(time.Second)
	c.Target.kill9()
	c.waitReports(c.Source, id, []string{"failure"}, 30*time.Second)
	c.Source.waitDaemonLog(`direction=outgoing status=failed`, 10*time.Second)
	c.Source.assertUsable(id)
	if _, err := os.Lstat(c.Target.dataDir(id)); err != nil {
		t.Fatalf("expected partial files before the restart: %v", err)
	}
	c.Target.restart()
	c.Target.assertGone(id)
	if entries, _ := os.ReadDir(filepath.Join(c.Target.Config.System.RootDirectory, "transfers")); len(entries) != 0 {
		t.Fatalf("stale transfer markers left: %v", entries)
	}
	// And the server can be moved again.
	c.startTransfer(id)
	c.waitReports(c.Target, id, []string{"success"}, 90*time.Second)
}

// kill -9 of the source mid-transfer: the target notices the truncated
// stream, removes what it received and the server it registered, and
// reports the failure; the restarted source has the server usable again,
// tells the panel that the transfer it was running failed, and can send
// the server again.
func TestTransferSourceKilled(t *testing.T) {
	t.Parallel() // own server UUID and nodes; mostly a throttled wait
	id := processID("7a000009-0000-4000-8000-000000000009")
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, throttled)
	fill(t, c.Source, id, 16<<20)
	want := snap(t, c.Source.dataDir(id))
	c.startTransfer(id)
	c.Target.waitDaemonLog(`server=`+id+` direction=incoming status=processing`, 20*time.Second)
	// The point: the kill lands some way into the transfer, not at its first byte.
	time.Sleep(time.Second)
	c.Source.kill9()

	c.waitReports(c.Target, id, []string{"failure"}, 30*time.Second)
	c.Target.waitDaemonLog(`server=`+id+` direction=incoming status=failed`, 10*time.Second)
	c.Target.assertGone(id)
	if _, err := engineInspect(context.Background(), testimages.Client(t), id); err == nil {
		t.Fatal("a container exists for a transfer whose source died")
	}
	waitNoMarkers(t, filepath.Join(c.Target.Config.System.RootDirectory, "transfers"))
	res, body := c.Target.request("GET", "/api/servers", nil, "")
	if res.StatusCode != 200 || strings.Contains(string(body), id) {
		t.Fatalf("the target still lists the server: %d %s", res.StatusCode, body)
	}
	if res, body := c.Target.request("DELETE", "/api/transfers/"+id, nil, ""); res.StatusCode != 409 {
		t.Fatalf("incoming cancel after the failure: %d %s", res.StatusCode, body)
	}

	// The panel still assigns the server to the source, which boots with
	// it usable, not transferring, its files untouched, and reports that
	// the transfer it was running when it died failed.
	c.Source.restart()
	c.waitReports(c.Source, id, []string{"failure"}, 30*time.Second)
	if res, body := c.Source.request("GET", "/api/servers/"+id, nil, ""); res.StatusCode != 200 {
		t.Fatalf("source GET after the restart: %d %s", res.StatusCode, body)
	}
	res, body = c.Source.request("DELETE", "/api/servers/"+id+"/transfer", nil, "")
	assertJSONError(t, res, body, 409)
	if !strings.Contains(string(body), "not currently being transferred") {
		t.Fatalf("outgoing cancel after the restart: %s", body)
	}
	c.Source.assertUsable(id)
	if diff := cmp.Diff(want, snap(t, c.Source.dataDir(id))); diff != "" {
		t.Fatalf("the source's files changed (-before +after):\n%s", diff)
	}
	if entries, _ := os.ReadDir(filepath.Join(c.Source.Config.System.RootDirectory, "transfers", "outgoing")); len(entries) != 0 {
		t.Fatalf("outgoing transfer markers left on the source: %v", entries)
	}
	// Nothing is stuck: the server can be moved again.
	c.startTransfer(id)
	c.waitReports(c.Target, id, []string{"failure", "success"}, 90*time.Second)
	c.Source.waitDaemonLog(`server=`+id+` direction=outgoing status=completed`, 30*time.Second)
	if got := c.reports(c.Source, id); !slices.Equal(got, []string{"failure"}) {
		t.Fatalf("source reports %v, want only the boot-time failure", got)
	}

	// Had the source died after the target's success, the panel would
	// have moved the server: the restarted source reports nothing then.
	c.assign[c.Source].set(id, false)
	c.assign[c.Target].set(id, true)
	outgoing := filepath.Join(c.Source.Config.System.RootDirectory, "transfers", "outgoing")
	c.Source.kill9()
	if err := os.WriteFile(filepath.Join(outgoing, id), []byte("sending"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Source.restart()
	c.Source.waitDaemonLog(`no longer assigned to this node; nothing to report" server=`+id, 10*time.Second)
	if got := c.reports(c.Source, id); !slices.Equal(got, []string{"failure"}) {
		t.Fatalf("source reports %v after a restart without the server", got)
	}
	if entries, _ := os.ReadDir(outgoing); len(entries) != 0 {
		t.Fatalf("outgoing transfer markers left on the source: %v", entries)
	}
}
