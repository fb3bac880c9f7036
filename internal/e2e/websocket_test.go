package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
	"github.com/wharf/wharf/internal/tokens"
)

// The websocket tests' two servers are named afresh in each test process:
// their containers are named after them on the one engine every suite
// shares, and two suites running at once (two make test, a CI run beside
// a developer's) drove each other's container under fixed names (issue 38
// §5: "a console-only token changed the state to running").
var (
	wsServerA = uuid.NewString()
	wsServerB = uuid.NewString()
)

const (
	wsUser1 = "a1a1a1a1-0000-4000-8000-000000000001"
	wsUser2 = "b2b2b2b2-0000-4000-8000-000000000002"
)

// startWSNode starts a node with two servers and waits until tokens minted
// now are newer than the daemon's boot.
func startWSNode(t *testing.T, mutate func(*config.Config)) *node {
	t.Helper()
	testimages.RequireDocker(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{gameServer(wsServerA), gameServer(wsServerB)}, mutate: mutate})
	waitNextSecond()
	return n
}

// TestWebsocketAuth covers the upgrade checks, a successful auth, a token
// refresh, and every refused token.
func TestWebsocketAuth(t *testing.T) {
	n := startWSNode(t, nil)
	all := []string{"*"}

	t.Run("unknown server is 404 before the upgrade", func(t *testing.T) {
		_, res, err := n.dialWS(t, "00000000-0000-4000-8000-000000000000", "")
		if err == nil || res == nil || res.StatusCode != 404 {
			t.Fatalf("dial: %v %v", err, res)
		}
	})
	t.Run("origin", func(t *testing.T) {
		_, res, err := n.dialWS(t, wsServerA, "https://evil.example")
		if err == nil || res == nil || res.StatusCode != 403 {
			t.Fatalf("foreign origin: %v %v", err, res)
		}
		w, _, err := n.dialWS(t, wsServerA, n.Config.Remote)
		if err != nil {
			t.Fatalf("the backend's origin was refused: %v", err)
		}
		_ = w.c.Close(websocket.StatusNormalClosure, "")
	})
	t.Run("success, status and stats, refresh", func(t *testing.T) {
		w := n.mustDial(t, wsServerA)
		w.send("auth", n.sign(t, wsClaims(wsServerA, wsUser1, all...)))
		if m, _ := w.next(5 * time.Second); m.Event != "auth success" || len(m.Args) != 0 {
			t.Fatalf("first frame %+v, want auth success", m)
		}
		if m, _ := w.next(5 * time.Second); m.Event != "status" || m.Args[0] != "offline" {
			t.Fatalf("second frame %+v, want status offline", m)
		}
		m, _ := w.next(5 * time.Second)
		var u map[string]any
		if m.Event != "stats" || json.Unmarshal([]byte(m.Args[0]), &u) != nil || u["state"] != "offline" {
			t.Fatalf("third frame %+v, want stats of an offline server", m)
		}
		// A later auth swaps the token (refresh).
		w.auth(n.sign(t, wsClaims(wsServerA, wsUser1, "control.console")))
		w.send("send stats")
		w.expect("stats", 5*time.Second, nil)
	})

	refused := map[string]func() string{
		"bad signature": func() string {
			tok, _ := tokens.Sign([]byte("not-the-node-token"), wsClaims(wsServerA, wsUser1, all...))
			return tok
		},
		"alg none": func() string { return algNone(wsClaims(wsServerA, wsUser1, all...)) },
		"expired": func() string {
			c := wsClaims(wsServerA, wsUser1, all...)
			c["exp"] = time.Now().Add(-time.Second).Unix()
			return n.sign(t, c)
		},
		"no iat": func() string {
			c := wsClaims(wsServerA, wsUser1, all...)
			delete(c, "iat")
			return n.sign(t, c)
		},
		"iat before boot": func() string {
			c := wsClaims(wsServerA, wsUser1, all...)
			c["iat"] = time.Now().Add(-time.Hour).Unix()
			return n.sign(t, c)
		},
		"wrong server": func() string { return n.sign(t, wsClaims(wsServerB, wsUser1, all...)) },
		"file download token": func() string {
			return n.sign(t, map[string]any{"file_path": "/a.txt", "server_uuid": wsServerA, "user_uuid": wsUser1,
				"unique_id": "x", "jti": "j", "iat": time.Now().Unix(), "exp": time.Now().Add(time.Minute).Unix()})
		},
		"upload token": func() string {
			return n.sign(t, map[string]any{"server_uuid": wsServerA, "user_uuid": wsUser1,
				"unique_id": "x", "jti": "j", "iat": time.Now().Unix(), "exp": time.Now().Add(time.Minute).Unix()})
		},
		"scope of another purpose": func() string {
			c := wsClaims(wsServerA, wsUser1, all...)
			c["scope"] = "file-upload"
			return n.sign(t, c)
		},
		"garbage": func() string { return "not.a.jwt" },
	}
	for name, mk := range refused {
		t.Run("refused: "+name, func(t *testing.T) {
			w := n.mustDial(t, wsServerA)
			w.send("auth", mk())
			m := w.expect2("auth success", "jwt error", 5*time.Second)
			if m.Event != "jwt error" {
				t.Fatalf("token accepted")
			}
			if strings.Contains(m.Args[0], "eyJ") {
				t.Fatalf("error echoes the token: %q", m.Args[0])
			}
			// Nothing is acted on without authentication, and no event is forwarded.
			w.send("send stats")
			w.expect("jwt error", 5*time.Second, nil)
			w.expectNone("stats", 300*time.Millisecond)
		})
	}
	if strings.Contains(n.log.String(), "eyJ") {
		t.Fatalf("the daemon logged a token:\n%s", n.log)
	}

	t.Run("unauthenticated socket closed after 10s", func(t *testing.T) {
		w := n.mustDial(t, wsServerA)
		start := time.Now()
		code := w.closed(15 * time.Second)
		if code != 4408 || time.Since(start) < 9*time.Second {
			t.Fatalf("closed with %d after %s; want 4408 after 10s", code, time.Since(start))
		}
	})
}

// TestWebsocketDeauthorize: deauthorizing a user closes only that user's
// sockets on the named servers (or on all servers without `servers`), old
// tokens are refused afterwards and new ones accepted.
func TestWebsocketDeauthorize(t *testing.T) {
	n := startWSNode(t, nil)
	open := func(server, user string) (*wsClient, string) {
		tok := n.sign(t, wsClaims(server, user, "*"))
		w := n.mustDial(t, server)
		w.auth(tok)
		return w, tok
	}
	u1A, tok1A := open(wsServerA, wsUser1)
	u1B, tok1B := open(wsServerB, wsUser1)
	u2A, _ := open(wsServerA, wsUser2)

	if res, body := n.request("POST", "/api/deauthorize-user", map[string]any{"servers": []string{wsServerA}}, ""); res.StatusCode != 400 || !strings.Contains(string(body), "error") {
		t.Fatalf("missing user: %d %s", res.StatusCode, body)
	}
	if res, _ := n.request("POST", "/api/deauthorize-user", map[string]any{"user": wsUser1}, "-"); res.StatusCode != 401 {
		t.Fatalf("without bearer: %d", res.StatusCode)
	}

	start := time.Now()
	if res, body := n.request("POST", "/api/deauthorize-user", map[string]any{"user": wsUser1, "servers": []string{wsServerA}}, ""); res.StatusCode != 204 {
		t.Fatalf("deauthorize: %d %s", res.StatusCode, body)
	}
	if code := u1A.closed(time.Second); code != 4401 {
		t.Fatalf("user 1 on A closed with %d, want 4401", code)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("closing took %s", el)
	}
	for _, w := range []*wsClient{u1B, u2A} {
		w.send("send stats")
		w.expect("stats", 5*time.Second, nil)
	}
	// Replaying the old token fails; the B token still works.
	w := n.mustDial(t, wsServerA)
	w.send("auth", tok1A)
	if m := w.expect2("auth success", "jwt error", 5*time.Second); m.Event != "jwt error" {
		t.Fatal("the deauthorized token was accepted again")
	}
	n.mustDial(t, wsServerB).auth(tok1B)
	// A token issued after the deauthorization is accepted.
	waitNextSecond()
	w.auth(n.sign(t, wsClaims(wsServerA, wsUser1, "*")))

	// Without servers: every server.
	if res, _ := n.request("POST", "/api/deauthorize-user", map[string]any{"user": wsUser1}, ""); res.StatusCode != 204 {
		t.Fatalf("deauthorize everywhere: %d", res.StatusCode)
	}
	if code := u1B.closed(time.Second); code != 4401 {
		t.Fatalf("user 1 on B closed with %d", code)
	}
	if code := w.closed(time.Second); code != 4401 {
		t.Fatalf("user 1's new socket on A closed with %d", code)
	}
	u2A.send("send stats")
	u2A.expect("stats", 5*time.Second, nil)
	w = n.mustDial(t, wsServerB)
	w.send("auth", tok1B)
	if m := w.expect2("auth success", "jwt error", 5*time.Second); m.Event != "jwt error" {
		t.Fatal("a token issued before the deauthorization everywhere was accepted")
	}
}

// TestWebsocketLimits: the 31st socket of a server is refused before the
// upgrade, a 1 MB frame closes the socket, and an inbound flood is answered
// with `throttled`.
func TestWebsocketLimits(t *testing.T) {
	n := startWSNode(t, nil)
	var socks []*wsClient
	for i := 0; i < 30; i++ {
		w, _, err := n.dialWS(t, wsServerA, "")
		if err != nil {
			t.Fatalf("socket %d: %v", i+1, err)
		}
		w.startReading()
		socks = append(socks, w)
	}
	_, res, err := n.dialWS(t, wsServerA, "")
	if err == nil || res == nil || res.StatusCode != 400 {
		t.Fatalf("31st socket: %v %v", err, res)
	}
	// Another server has its own allowance.
	n.mustDial(t, wsServerB)

	// 1 MB frame.
	big := socks[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = big.c.Write(ctx, websocket.MessageText, []byte(`{"event":"send stats","args":["`+strings.Repeat("x", 1<<20)+`"]}`))
	if code := big.closed(5 * time.Second); code != websocket.StatusMessageTooBig {
		t.Fatalf("1 MB frame: closed with %d, want 1009", code)
	}
	// Its slot is free again.
	wait.For(t, 5*time.Second, func() bool {
		w, _, err := n.dialWS(t, wsServerA, "")
		if err == nil {
			socks[0] = w
			w.startReading()
		}
		return err == nil
	}, "the closed socket's slot to be free again")

	// Inbound flood: 40 messages at once.
	w := socks[1]
	w.auth(n.sign(t, wsClaims(wsServerA, wsUser1, "*")))
	for i := 0; i < 40; i++ {
		w.send("send stats")
	}
	m := w.expect("throttled", 5*time.Second, nil)
	if m.Args[0] != "global" && m.Args[0] != "send stats" {
		t.Fatalf("throttled args %v", m.Args)
	}
	// Still usable after the bucket refills.
	time.Sleep(2 * time.Second)
	for drained := false; !drained; {
		_, ok := w.next(100 * time.Millisecond)
		drained = !ok
	}
	w.send("send stats")
	w.expect("stats", 5*time.Second, nil)
}

// TestWebsocketTokenExpiry: `token expiring` comes a minute before exp (at
// once for a token that lives less), then `token expired` and the close.
func TestWebsocketTokenExpiry(t *testing.T) {
	n := startWSNode(t, nil)
	c := wsClaims(wsServerA, wsUser1, "*")
	c["exp"] = time.Now().Add(3 * time.Second).Unix()
	w := n.mustDial(t, wsServerA)
	w.auth(n.sign(t, c))
	w.expect("token expiring", 2*time.Second, nil)
	w.expect("token expired", 5*time.Second, nil)
	if code := w.closed(2 * time.Second); code != 4401 {
		t.Fatalf("closed with %d, want 4401", code)
	}
}

// TestWebsocketSuspension: a sync that finds the server suspended closes
// its sockets with 1000; a new socket is closed with 1000 at once (the
// panel's console does not reconnect after 1000).
func TestWebsocketSuspension(t *testing.T) {
	n := startWSNode(t, nil)
	a1, a2 := n.mustDial(t, wsServerA), n.mustDial(t, wsServerA)
	a1.auth(n.sign(t, wsClaims(wsServerA, wsUser1, "*")))
	b := n.mustDial(t, wsServerB)
	b.auth(n.sign(t, wsClaims(wsServerB, wsUser1, "*")))

	n.Panel.UpdateSettings(wsServerA, "suspended", true)
	if res, body := n.request("POST", "/api/servers/"+wsServerA+"/sync", nil, ""); res.StatusCode/100 != 2 {
		t.Fatalf("sync: %d %s", res.StatusCode, body)
	}
	for i, w := range []*wsClient{a1, a2} {
		if code := w.closed(2 * time.Second); code != websocket.StatusNormalClosure {
			t.Fatalf("socket %d closed with %d, want 1000", i, code)
		}
	}
	b.send("send stats")
	b.expect("stats", 5*time.Second, nil)
	if code := n.mustDial(t, wsServerA).closed(2 * time.Second); code != websocket.StatusNormalClosure {
		t.Fatalf("new socket on a suspended server closed with %d", code)
	}
}

// The panel's console (panelConsole) recovers by itself from a daemon
// restart and from an expired token, and stops reconnecting when the
// server is suspended: each ends within a few seconds in an authenticated
// console or in a closed socket that stays closed (issue 12 part 7).

func TestWebsocketPanelConsoleDaemonRestart(t *testing.T) {
	n := startWSNode(t, nil)
	mint := func() string { return n.sign(t, wsClaims(wsServerA, wsUser1, "*")) }
	p := n.openPanelConsole(t, wsServerA, mint(), mint)
	p.waitAuthed(5 * time.Second)
	n.stop()
	wait.For(t, 5*time.Second, func() bool { authed, _, _ := p.state(); return !authed }, "the session to drop its authentication")
	n.restart()
	start := time.Now()
	// The stored token was issued before the boot: the daemon's answer must
	// make the panel fetch a new one.
	p.waitAuthed(5 * time.Second)
	t.Logf("console authenticated %s after the daemon answered: %s", time.Since(start), p)
}

func TestWebsocketPanelConsoleExpiredToken(t *testing.T) {
	n := startWSNode(t, nil)
	mint := func() string { return n.sign(t, wsClaims(wsServerA, wsUser1, "*")) }
	// A laptop wakes up: the socket dropped while it slept, and the stored
	// token has expired since.
	stale := wsClaims(wsServerA, wsUser1, "*")
	stale["exp"] = time.Now().Add(-time.Minute).Unix()
	start := time.Now()
	p := n.openPanelConsole(t, wsServerA, n.sign(t, stale), mint)
	p.waitAuthed(5 * time.Second)
	t.Logf("console authenticated after %s: %s", time.Since(start), p)
}

func TestWebsocketPanelConsoleSuspended(t *testing.T) {
	n := startWSNode(t, nil)
	mint := func() string { return n.sign(t, wsClaims(wsServerA, wsUser1, "*")) }
	p := n.openPanelConsole(t, wsServerA, mint(), mint)
	p.waitAuthed(5 * time.Second)
	n.Panel.UpdateSettings(wsServerA, "suspended", true)
	if res, body := n.request("POST", "/api/servers/"+wsServerA+"/sync", nil, ""); res.StatusCode/100 != 2 {
		t.Fatalf("sync: %d %s", res.StatusCode, body)
	}
	if code := p.waitGivenUp(3*time.Second, 3*time.Second); code != websocket.StatusNormalClosure {
		t.Fatalf("closed for good with %d, want 1000: %s", code, p)
	}
}

// TestWebsocketConsole drives a real container from the websocket:
// permission gates, status/stats order on start and stop, commands,
// `send logs`, the console flood throttle, a client that stops reading,
// and the activity records sent to the backend.
func TestWebsocketConsole(t *testing.T) {
	testimages.RequireDocker(t)
	testimages.GameServer(context.Background(), t)
	const metricsTok = "e2e-scrape-token-0123456789"
	metricsPort := freePort(t)
	n := startWSNode(t, func(c *config.Config) {
		c.System.ActivitySendInterval = 1
		c.Metrics = config.Metrics{BindAddress: fmt.Sprintf("127.0.0.1:%d", metricsPort), Token: metricsTok}
		// A blocked write is given 2 s instead of 10 s.
		c.Testing.WebsocketWriteTimeoutMS = 2000
	})
	// The daemon leaves containers running when it stops: delete the
	// server (and its container) whatever the outcome.
	t.Cleanup(func() { n.request("DELETE", "/api/servers/"+wsServerA, nil, "") })

	console := n.mustDial(t, wsServerA)
	console.auth(n.sign(t, wsClaims(wsServerA, wsUser2, "control.console")))
	admin := n.mustDial(t, wsServerA)
	admin.auth(n.sign(t, wsClaims(wsServerA, wsUser1, "control.console", "control.start", "control.stop")))

	// A console-only token cannot start the server.
	console.send("set state", "start")
	if m := console.expect("daemon error", 5*time.Second, nil); !strings.Contains(m.Args[0], "permission") {
		t.Fatalf("daemon error %q", m.Args[0])
	}
	// The point: a refused start must not happen late either; the state is read a moment after the refusal.
	time.Sleep(500 * time.Millisecond)
	if st := n.details(wsServerA)["state"]; st != "offline" {
		t.Fatalf("a console-only token changed the state to %v", st)
	}
	// Neither restart (not granted) nor an unknown action.
	admin.send("set state", "restart")
	admin.expect("daemon error", 5*time.Second, func(a string) bool { return strings.Contains(a, "permission") })
	admin.send("set state", "jump")
	admin.expect("daemon error", 5*time.Second, func(a string) bool { return strings.Contains(a, "not valid") })

	// Start: the lock is busy for a second start sent right behind it.
	admin.send("set state", "start")
	admin.send("set state", "start")
	seq := collectUntil(t, admin, 60*time.Second, func(m wsMsg) bool { return m.Event == "status" && m.Args[0] == "running" })
	locked := false
	for _, m := range seq {
		locked = locked || m.Event == "daemon error" && strings.Contains(strings.ToLower(m.Args[0]), "another power action")
	}
	if !locked {
		t.Fatalf("the second start did not report the busy power lock: %v", seq)
	}
	checkStatusStatsOrder(t, seq, []string{"starting", "running"})

	// Commands: console-only token may send them.
	console.send("send command", "echo hello-from-ws")
	console.expect("console output", 10*time.Second, func(a string) bool { return a == "hello-from-ws" })

	// send logs replays the console, boot lines included.
	console.send("send logs")
	console.expect("console output", 5*time.Second, func(a string) bool { return strings.HasPrefix(a, "Done (") })

	// Console flood: the server's throttle drops lines and says so; the
	// server keeps running and the sockets stay open.
	console.send("send command", "flood 60000")
	console.expect("console output", 20*time.Second, func(a string) bool { return strings.Contains(a, "too quickly") })

	// A client that stops reading while 18 MB of console output pass: it is
	// dropped, the reading clients keep receiving everything.
	idle, _, err := n.dialWS(t, wsServerA, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(wsMsg{Event: "auth", Args: []string{n.sign(t, wsClaims(wsServerA, wsUser2, "control.console"))}})
	if err := idle.c.Write(context.Background(), websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
	// The idle client reads nothing, so no answer to its auth can be
	// awaited: a moment for the daemon to take it before the flood.
	time.Sleep(200 * time.Millisecond)
	cmds := make([]string, 300)
	for i := range cmds {
		cmds[i] = "longline 60000"
	}
	cmds = append(cmds, "echo after-flood")
	if res, body := n.request("POST", "/api/servers/"+wsServerA+"/commands", map[string]any{"commands": cmds}, ""); res.StatusCode != 204 {
		t.Fatalf("commands: %d %s", res.StatusCode, body)
	}
	start := time.Now()
	admin.expect("console output", 60*time.Second, func(a string) bool { return a == "after-flood" })
	console.expect("console output", 60*time.Second, func(a string) bool { return a == "after-flood" })
	t.Logf("reading clients got 18 MB of console in %s", time.Since(start))
	if st := n.details(wsServerA)["state"]; st != "running" {
		t.Fatalf("the flood changed the state to %v", st)
	}
	// The daemon gives a blocked write 2 s here (testing knob; 10 s in
	// production), then drops the session. Reading after that drains what
	// the kernel buffered, then ends: the socket was closed without our
	// help. (Reading earlier would let the session catch up.)
	wait.For(t, 40*time.Second, func() bool { return scrapeGauge(metricsPort, metricsTok, "wharf_websocket_sessions") == "2" },
		"the daemon to drop the non-reading client (2 sessions left)\n%s", n.log)
	idleErr := make(chan error, 1)
	go func() {
		for {
			if _, _, err := idle.c.Read(context.Background()); err != nil {
				idleErr <- err
				return
			}
		}
	}()
	select {
	case err := <-idleErr:
		t.Logf("non-reading client dropped after %s: %v", time.Since(start), err)
	case <-time.After(40 * time.Second):
		t.Fatalf("the non-reading client was not dropped\n%s", n.log)
	}
	if !admin.isOpen() || !console.isOpen() {
		t.Fatal("a reading client was dropped")
	}

	// Stop: status stopping, offline, then stats with reset values.
	admin.send("set state", "stop")
	seq = collectUntil(t, admin, 60*time.Second, func(m wsMsg) bool {
		if m.Event != "stats" {
			return false
		}
		var u map[string]any
		_ = json.Unmarshal([]byte(m.Args[0]), &u)
		return u["state"] == "offline"
	})
	checkStatusStatsOrder(t, seq, []string{"stopping", "offline"})
	var last map[string]any
	_ = json.Unmarshal([]byte(seq[len(seq)-1].Args[0]), &last)
	if last["memory_bytes"] != float64(0) || last["cpu_absolute"] != float64(0) || last["uptime"] != float64(0) {
		t.Fatalf("stats after offline not reset: %v", last)
	}

	// Activity: the power actions and the commands reached the backend.
	wait.For(t, 10*time.Second, func() bool {
		got := activityEvents(n)
		return got["server:power.start"] && got["server:power.stop"] && got["server:console.command:echo hello-from-ws"]
	}, "the power actions and the command in the backend's activity")
	if got := activityEvents(n); got["server:power.restart"] {
		t.Fatal("a refused action was recorded as activity")
	}
}

// collectUntil gathers every frame but console output until stop matches.
func collectUntil(t *testing.T, w *wsClient, d time.Duration, stop func(wsMsg) bool) []wsMsg {
	t.Helper()
	var out []wsMsg
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		m, ok := w.next(time.Until(deadline))
		if !ok {
			continue
		}
		if m.Event != "console output" {
			out = append(out, m)
		}
		if stop(m) {
			return out
		}
	}
	t.Fatalf("sequence did not complete within %s: %v", d, out)
	return nil
}

// checkStatusStatsOrder: the statuses come in the wanted order, and every
// stats frame reports the state of the last status before it.
func checkStatusStatsOrder(t *testing.T, seq []wsMsg, want []string) {
	t.Helper()
	var statuses []string
	current := ""
	previous := ""
	for _, m := range seq {
		switch m.Event {
		case "status":
			statuses = append(statuses, m.Args[0])
			previous, current = current, m.Args[0]
			continue
		case "stats":
		default:
			continue
		}
		var u map[string]any
		if err := json.Unmarshal([]byte(m.Args[0]), &u); err != nil {
			t.Fatalf("stats arg is not JSON: %q", m.Args[0])
		}
		// A sample taken just before a change may trail its status by one
		// step; after offline every stats frame is the reset one.
		ok := current == "" || u["state"] == current || u["state"] == previous && current != "offline"
		if !ok {
			t.Fatalf("stats with state %v after status %s: %v", u["state"], current, seq)
		}
	}
	if strings.Join(statuses, ",") != strings.Join(want, ",") {
		t.Fatalf("statuses %v, want %v", statuses, want)
	}
}

// activityEvents lists what POST /activity delivered: event names, and
// "server:console.command:<command>" for commands.
func activityEvents(n *node) map[string]bool {
	got := map[string]bool{}
	for _, c := range n.Panel.CallsTo("POST", "/activity") {
		var body struct {
			Data []struct {
				User     *string        `json:"user"`
				Server   string         `json:"server"`
				Event    string         `json:"event"`
				Metadata map[string]any `json:"metadata"`
				IP       string         `json:"ip"`
			} `json:"data"`
		}
		if json.Unmarshal(c.Body, &body) != nil {
			continue
		}
		for _, a := range body.Data {
			if a.User == nil || a.Server != wsServerA || a.IP != "127.0.0.1" {
				continue
			}
			got[a.Event] = true
			if cmd, ok := a.Metadata["command"].(string); ok {
				got[a.Event+":"+cmd] = true
			}
		}
	}
	return got
}
