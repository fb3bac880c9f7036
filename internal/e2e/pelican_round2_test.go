package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// TestPelicanDeauthorizeNestedBody: removing a subuser in the Pelican panel
// (app/Repositories/Daemon/DaemonServerRepository.php, deauthorize) posts
// ['json' => ['user' => ..., 'servers' => [...]]] through Laravel's HTTP
// client, so the body nests the request under "json". Before the fix Wharf
// answered 400, the panel's job gave up and the removed subuser kept the
// console and SFTP until the token expired. The test sends the panel's exact
// bytes: the user's websocket and SSH connection on the listed server close
// within a second, their old token is refused, and another user stays.
func TestPelicanDeauthorizeNestedBody(t *testing.T) {
	t.Parallel()
	n := twoUsersNode(t, nil)
	waitNextSecond()
	aliceSFTP := n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
	bobSFTP := n.sftpOpen(t, sftpLogin("bob", sftpSrvA), ssh.Password(sftpOther2))
	aliceTok := n.sign(t, wsClaims(sftpSrvA, sftpOwner, "*"))
	aliceWS := n.mustDial(t, sftpSrvA)
	aliceWS.auth(aliceTok)
	bobWS := n.mustDial(t, sftpSrvA)
	bobWS.auth(n.sign(t, wsClaims(sftpSrvA, sftpOther, "*")))

	body := `{"json":{"user":"` + sftpOwner + `","servers":["` + sftpSrvA + `"]}}`
	if res, got := n.request("POST", "/api/deauthorize-user", body, ""); res.StatusCode != 204 {
		t.Fatalf("the Pelican panel's deauthorize body: %d %s (the panel gives up and the subuser keeps access)", res.StatusCode, got)
	}
	if code := aliceWS.closed(time.Second); code != 4401 {
		t.Fatalf("the removed subuser's console closed with %d, want 4401: they can still watch and type", code)
	}
	waitClosed(t, aliceSFTP.ssh, time.Second, "the removed subuser's SSH connection")
	stillOpen(t, bobSFTP, "another user's SFTP session")
	bobWS.send("send stats")
	bobWS.expect("stats", 5*time.Second, nil)

	again := n.mustDial(t, sftpSrvA)
	again.send("auth", aliceTok)
	if m := again.expect2("auth success", "jwt error", 5*time.Second); m.Event != "jwt error" {
		t.Fatal("the removed subuser's old token was accepted again")
	}

	// Both shapes at once are ambiguous: refused with a JSON error, nothing done.
	both := `{"user":"` + sftpOther + `","json":{"user":"` + sftpOther + `"}}`
	if res, got := n.request("POST", "/api/deauthorize-user", both, ""); res.StatusCode != 400 || !strings.Contains(string(got), `"error"`) {
		t.Fatalf("both shapes: %d %s", res.StatusCode, got)
	}
	stillOpen(t, bobSFTP, "another user after a refused request")
}

// TestPelicanDiagnosticsEndpointsAndLogs: the Pelican panel's node
// diagnostics tab (DaemonSystemRepository::getDiagnostics) asks for
// include_endpoints, include_logs and log_lines, and offers the report for
// upload to a public paste site. As Pelican Wings (router/router_system.go),
// the endpoints are left out unless include_endpoints=true, and the log lines
// are the daemon's own, whatever started it: the test's daemon runs under no
// systemd unit, so a report from the journal would have none.
func TestPelicanDiagnosticsEndpointsAndLogs(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true})
	panelURL := n.Config.Remote
	get := func(query string) string {
		t.Helper()
		res, body := n.request("GET", "/api/diagnostics"+query, nil, "")
		if res.StatusCode != 200 {
			t.Fatalf("diagnostics%s: %d %s", query, res.StatusCode, body)
		}
		return string(body)
	}
	for _, q := range []string{"", "?include_endpoints=false&include_logs=true&log_lines=200"} {
		if body := get(q); strings.Contains(body, panelURL) {
			t.Fatalf("diagnostics%s show the panel's URL %s: the Pelican user pastes it in public\n%s", q, panelURL, body)
		} else if !strings.Contains(body, "msg=starting") {
			t.Fatalf("diagnostics%s have none of the daemon's own log lines (the Pelican user sees an empty log)\n%s", q, body)
		}
	}
	if body := get("?include_endpoints=true&log_lines=5"); !strings.Contains(body, panelURL) {
		t.Fatalf("include_endpoints=true leaves out the panel's URL\n%s", body)
	}
	if body := get("?include_logs=false"); strings.Contains(body, "log lines ==") || strings.Contains(body, "msg=starting") {
		t.Fatalf("include_logs=false still shows log lines\n%s", body)
	}
	if strings.Contains(get("?include_endpoints=true"), n.Token) {
		t.Fatal("the report prints the node token")
	}
}

// TestRequireTokenScope: Pterodactyl panels since 1.12 (pterodactyl/panel
// #5636) and Pelican put a scope claim on every JWT they mint. With
// api.require_token_scope on, a token without one is refused on every face
// (the console's "jwt error", a 401 JSON error on signed URLs), and tokens
// with their scope work; the diagnostics say what the panel sent.
func TestRequireTokenScope(t *testing.T) {
	t.Parallel()
	n := signedNode(t, func(c *config.Config) { c.API.RequireTokenScope = true })
	waitNextSecond()

	scoped := func(c map[string]any, scope string) map[string]any { c["scope"] = scope; return c }
	if res, body := n.get("/download/file?token=" + n.signURL(downloadClaims("hello.txt"))); res.StatusCode != 401 {
		t.Fatalf("a download token without scope: %d %s (a Pelican user would download with a token of any purpose)", res.StatusCode, body)
	} else {
		assertJSONError(t, res, body, 401)
	}
	if res, body := n.get("/download/file?token=" + n.signURL(scoped(downloadClaims("hello.txt"), "file-download"))); res.StatusCode != 200 || string(body) != "hello, world\n" {
		t.Fatalf("a download token with its scope: %d %q", res.StatusCode, body)
	}

	noScope := n.mustDial(t, signedServer)
	noScope.send("auth", n.sign(t, wsClaims(signedServer, sftpOwner, "*")))
	if m := noScope.expect2("auth success", "jwt error", 5*time.Second); m.Event != "jwt error" {
		t.Fatal("a console token without scope was accepted")
	}
	withScope := n.mustDial(t, signedServer)
	withScope.auth(n.sign(t, scoped(wsClaims(signedServer, sftpOwner, "*"), "websocket")))

	res, body := n.request("GET", "/api/diagnostics?include_logs=false", nil, "")
	if res.StatusCode != 200 || !strings.Contains(string(body), "api.require_token_scope: true") ||
		!strings.Contains(string(body), "with a scope claim") || !strings.Contains(string(body), "were refused") {
		t.Fatalf("diagnostics: %d\n%s", res.StatusCode, body)
	}
}

// TestDiagnosticsSuggestRequiringScopes: when every token the panel sent
// carried a scope, the report suggests turning the check on.
func TestDiagnosticsSuggestRequiringScopes(t *testing.T) {
	t.Parallel()
	n := signedNode(t, nil)
	c := downloadClaims("hello.txt")
	c["scope"] = "file-download"
	if res, _ := n.get("/download/file?token=" + n.signURL(c)); res.StatusCode != 200 {
		t.Fatalf("download: %d", res.StatusCode)
	}
	res, body := n.request("GET", "/api/diagnostics?include_logs=false", nil, "")
	if res.StatusCode != 200 || !strings.Contains(string(body), "set api.require_token_scope: true") {
		t.Fatalf("diagnostics: %d\n%s", res.StatusCode, body)
	}
}

// TestPelicanStatePush: Pelican Wings pushes every state change to
// POST /api/remote/servers/{uuid}/container/status (remote/servers.go,
// PushServerStateChange), and the Pelican panel caches it for an hour and
// shows it without polling (ServerContainersController::status). A panel
// without the route (Pterodactyl answers 404) gets one push, not one per
// change.
func TestPelicanStatePush(t *testing.T) {
	t.Parallel()
	statuses := func(n *node, uuid string) []string {
		var out []string
		for _, c := range n.Panel.CallsTo("POST", "/servers/"+uuid+"/container/status") {
			var body struct {
				Data struct {
					Prev string `json:"previous_state"`
					New  string `json:"new_state"`
				} `json:"data"`
			}
			if err := json.Unmarshal(c.Body, &body); err != nil {
				t.Fatalf("push body %s: %v", c.Body, err)
			}
			out = append(out, body.Data.Prev+">"+body.Data.New)
		}
		return out
	}
	s := exampleServer(knownServer)
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{s}})
	n.power(s.UUID, "start")
	n.waitState(s.UUID, "running", 30*time.Second)
	wait.For(t, 10*time.Second, func() bool {
		got := statuses(n, s.UUID)
		return len(got) > 0 && strings.HasSuffix(got[len(got)-1], ">running")
	}, "the Pelican panel to hear the server is running (it shows what was pushed last, for an hour)")
	// Pelican Wings' utilization carries disk_io (environment/stats.go).
	if u, _ := n.details(s.UUID)["utilization"].(map[string]any); u == nil || u["disk_io"] == nil {
		t.Fatalf("utilization without disk_io: %v", n.details(s.UUID)["utilization"])
	} else if io, _ := u["disk_io"].(map[string]any); io == nil || io["read_bytes"] == nil || io["write_bytes"] == nil {
		t.Fatalf("disk_io without read_bytes/write_bytes: %v", u["disk_io"])
	}
	n.power(s.UUID, "stop")
	n.waitState(s.UUID, "offline", 30*time.Second)
	wait.For(t, 10*time.Second, func() bool {
		got := statuses(n, s.UUID)
		return strings.HasSuffix(got[len(got)-1], ">offline")
	}, "the Pelican panel to hear the server is offline")

	// Pterodactyl: no such route.
	p := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{exampleServer(knownServer)}})
	p.Panel.RemoveRoute("/container/status")
	p.power(knownServer, "start")
	p.waitState(knownServer, "running", 30*time.Second)
	p.power(knownServer, "stop")
	p.waitState(knownServer, "offline", 30*time.Second)
	p.power(knownServer, "start")
	p.waitState(knownServer, "running", 30*time.Second)
	if got := statuses(p, knownServer); len(got) > 1 {
		t.Fatalf("a panel without the route got %d pushes (%v), want at most one", len(got), got)
	}
	if strings.Contains(p.log.String(), "level=ERROR") {
		t.Fatalf("a panel without the route caused errors in the log:\n%s", p.log)
	}
}

// TestPelicanCrashActivity: a crash is recorded as the server:crashed
// activity with exit_code, oomkilled and the last console lines
// (system.crash_detection_activity_lines, default 2), as Pelican Wings'
// server/crash.go does; the Pelican panel's activity log shows "Server
// crashed" with them.
func TestPelicanCrashActivity(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{exampleServer(knownServer)}, mutate: func(c *config.Config) {
		c.System.ActivitySendInterval = 1
	}})
	n.power(knownServer, "start")
	n.waitState(knownServer, "running", 30*time.Second)
	n.command(knownServer, "say before the crash", "crash")
	var crash map[string]any
	wait.For(t, 30*time.Second, func() bool {
		for _, c := range n.Panel.CallsTo("POST", "/activity") {
			var body struct {
				Data []struct {
					Event    string         `json:"event"`
					Server   string         `json:"server"`
					User     *string        `json:"user"`
					Metadata map[string]any `json:"metadata"`
				} `json:"data"`
			}
			if json.Unmarshal(c.Body, &body) != nil {
				continue
			}
			for _, a := range body.Data {
				if a.Event == "server:crashed" && a.Server == knownServer && a.User == nil {
					crash = a.Metadata
					return true
				}
			}
		}
		return false
	}, "the server:crashed activity (the Pelican panel's activity log shows no crash without it)")
	logs, _ := crash["logs"].([]any)
	if crash["exit_code"] != float64(139) || crash["oomkilled"] != false || len(logs) != 2 ||
		logs[0] != "Unknown command: say before the crash" || logs[1] != "Segmentation fault" {
		t.Fatalf("server:crashed metadata %v: want exit_code 139, oomkilled false and the last 2 console lines", crash)
	}
}

// TestPelicanSystemIPs: docker.system_ips (failover and NAT addresses the
// node is reached at but that are on none of its interfaces) are added to
// GET /api/system/ips, which the Pelican panel's allocation wizard offers
// (Pelican Wings' router/router_system.go getSystemIps).
func TestPelicanSystemIPs(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true, mutate: func(c *config.Config) {
		c.Docker.SystemIPs = []string{"203.0.113.50", "2001:db8::50"}
	}})
	var got struct {
		IPs []string `json:"ip_addresses"`
	}
	getJSON(t, n, "/api/system/ips", &got)
	for _, want := range []string{"203.0.113.50", "2001:db8::50"} {
		if !slices.Contains(got.IPs, want) {
			t.Fatalf("ips %v lack %s: the Pelican allocation wizard cannot offer the failover address", got.IPs, want)
		}
	}
}
