package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/wharf/wharf/internal/testutil/wait"
	"github.com/wharf/wharf/internal/tokens"
)

// wsMsg is one websocket frame.
type wsMsg struct {
	Event string   `json:"event"`
	Args  []string `json:"args"`
}

// wsClient is a browser-style console client.
type wsClient struct {
	t    testing.TB
	c    *websocket.Conn
	msgs chan wsMsg
	err  chan error // the read error that ended the socket
	done chan struct{}
}

// waitNextSecond returns once the wall clock is in a later second than
// when it was called: tokens compare iat at second granularity, and one
// issued in the daemon's boot second (or a deauthorization's) is refused.
func waitNextSecond() {
	now := time.Now()
	// The point: the clock must cross into the next second.
	time.Sleep(now.Truncate(time.Second).Add(time.Second).Sub(now) + 10*time.Millisecond)
}

// wsClaims are the claims of a valid websocket token as the panel mints it.
func wsClaims(server, user string, perms ...string) map[string]any {
	now := time.Now()
	p := make([]any, len(perms))
	for i, s := range perms {
		p[i] = s
	}
	return map[string]any{
		"iss": "http://panel.test", "aud": []string{"http://node.test"}, "jti": "0123456789abcdef",
		"iat": now.Unix(), "nbf": now.Add(-5 * time.Minute).Unix(), "exp": now.Add(10 * time.Minute).Unix(),
		"unique_id": "u-" + now.Format("150405.000000"), "user_uuid": user, "user_id": 7,
		"server_uuid": server, "permissions": p,
	}
}

func (n *node) sign(t testing.TB, claims map[string]any) string {
	t.Helper()
	tok, err := tokens.Sign([]byte(n.Token), claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// algNone builds an unsigned token with alg "none".
func algNone(claims map[string]any) string {
	h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	b, _ := json.Marshal(claims)
	return h + "." + base64.RawURLEncoding.EncodeToString(b) + "."
}

func (n *node) wsURL(server string) string {
	return "ws" + strings.TrimPrefix(n.URL, "http") + "/api/servers/" + server + "/ws"
}

// dialWS opens a socket; res is the HTTP answer when the upgrade failed.
func (n *node) dialWS(t testing.TB, server string, origin string) (*wsClient, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	c, res, err := websocket.Dial(ctx, n.wsURL(server), &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, res, err
	}
	c.SetReadLimit(-1)
	w := &wsClient{t: t, c: c, msgs: make(chan wsMsg, 100000), err: make(chan error, 1), done: make(chan struct{})}
	t.Cleanup(func() { _ = c.CloseNow() })
	return w, res, nil
}

// mustDial opens a socket and starts reading it.
func (n *node) mustDial(t testing.TB, server string) *wsClient {
	t.Helper()
	w, res, err := n.dialWS(t, server, "")
	if err != nil {
		status := 0
		if res != nil {
			status = res.StatusCode
		}
		t.Fatalf("dial %s: %v (HTTP %d)", server, err, status)
	}
	w.startReading()
	return w
}

func (w *wsClient) startReading() {
	go func() {
		defer close(w.done)
		for {
			_, data, err := w.c.Read(context.Background())
			if err != nil {
				w.err <- err
				return
			}
			var m wsMsg
			if err := json.Unmarshal(data, &m); err != nil {
				w.err <- err
				return
			}
			if m.Args == nil {
				w.err <- errors.New("frame without args array: " + string(data))
				return
			}
			w.msgs <- m
		}
	}()
}

func (w *wsClient) send(event string, args ...string) {
	w.t.Helper()
	if args == nil {
		args = []string{}
	}
	b, _ := json.Marshal(wsMsg{Event: event, Args: args})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, b); err != nil {
		w.t.Fatalf("send %s: %v", event, err)
	}
}

// next returns the next frame, or ok=false when none came within d (or the
// socket ended).
func (w *wsClient) next(d time.Duration) (wsMsg, bool) {
	select {
	case m := <-w.msgs:
		return m, true
	case <-time.After(d):
		return wsMsg{}, false
	case <-w.done:
		select {
		case m := <-w.msgs:
			return m, true
		default:
			return wsMsg{}, false
		}
	}
}

// expect skips frames until one with this event (and, when match is set, a
// matching first arg) arrives; it fails after d.
func (w *wsClient) expect(event string, d time.Duration, match func(arg string) bool) wsMsg {
	w.t.Helper()
	deadline := time.Now().Add(d)
	var seen []string
	for {
		left := time.Until(deadline)
		if left <= 0 {
			w.t.Fatalf("no %q frame within %s; saw %d others, last: %v", event, d, len(seen), tail(seen, 5))
		}
		m, ok := w.next(left)
		if !ok {
			continue
		}
		if m.Event == event && (match == nil || len(m.Args) > 0 && match(m.Args[0])) {
			return m
		}
		seen = append(seen, m.Event+" "+strings.Join(m.Args, " "))
	}
}

// expectNone fails if a frame with this event arrives within d.
func (w *wsClient) expectNone(event string, d time.Duration) {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if m, ok := w.next(time.Until(deadline)); ok && m.Event == event {
			w.t.Fatalf("unexpected %q frame: %v", event, m.Args)
		}
	}
}

// closed waits until the socket ends and returns its close status (-1 for
// an end without a close frame).
func (w *wsClient) closed(d time.Duration) websocket.StatusCode {
	w.t.Helper()
	select {
	case err := <-w.err:
		return websocket.CloseStatus(err)
	case <-time.After(d):
		w.t.Fatalf("socket still open after %s", d)
	}
	return 0
}

// isOpen reports whether the socket is still open (drains queued frames).
func (w *wsClient) isOpen() bool {
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}

// auth sends the token and expects auth success.
func (w *wsClient) auth(token string) {
	w.t.Helper()
	w.send("auth", token)
	m := w.expect2("auth success", "jwt error", 10*time.Second)
	if m.Event != "auth success" {
		w.t.Fatalf("auth refused: %v", m.Args)
	}
}

// expect2 returns the first frame that is either of two events.
func (w *wsClient) expect2(a, b string, d time.Duration) wsMsg {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		m, ok := w.next(time.Until(deadline))
		if ok && (m.Event == a || m.Event == b) {
			return m
		}
	}
	w.t.Fatalf("neither %q nor %q within %s", a, b, d)
	return wsMsg{}
}

func tail(s []string, n int) []string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// panelConsole drives a socket as the Pterodactyl panel's browser console
// does (its Websocket.ts on sockette, driven by WebsocketHandler):
//   - it reconnects one second after any close but 1000, 1001 and 1005
//     (also after a failed dial), and re-sends the stored token on every
//     open;
//   - it fetches a new token (mint) only on `token expiring`, `token
//     expired`, and a `jwt error` whose text contains one of
//     panelRefreshTexts, then sends it on the open socket; any other `jwt
//     error` is the "please refresh the page" dead end, counted in
//     refreshPage.
type panelConsole struct {
	t    testing.TB
	url  string
	mint func() string

	mu          sync.Mutex
	token       string
	conn        *websocket.Conn
	opens       int                  // sockets opened
	authed      bool                 // the current socket is authenticated
	final       websocket.StatusCode // the close that ended reconnecting (0 while it goes on)
	refreshPage []string             // jwt error texts the panel gives up on
	closes      []websocket.StatusCode

	cancel context.CancelFunc
	done   chan struct{}
}

// panelRefreshTexts: the panel fetches a new token after a `jwt error`
// only when its text contains one of these.
var panelRefreshTexts = []string{"jwt: exp claim is invalid", "jwt: created too far in past (denylist)"}

// openPanelConsole starts a console on server with a stored token; mint
// plays the panel's token endpoint.
func (n *node) openPanelConsole(t testing.TB, server, token string, mint func() string) *panelConsole {
	ctx, cancel := context.WithCancel(context.Background())
	p := &panelConsole{t: t, url: n.wsURL(server), mint: mint, token: token, cancel: cancel, done: make(chan struct{})}
	go p.run(ctx)
	t.Cleanup(func() { cancel(); <-p.done })
	return p
}

func (p *panelConsole) run(ctx context.Context) {
	defer close(p.done)
	for ctx.Err() == nil {
		code := p.session(ctx)
		p.mu.Lock()
		p.authed = false
		p.closes = append(p.closes, code)
		if code == websocket.StatusNormalClosure || code == websocket.StatusGoingAway || code == websocket.StatusNoStatusRcvd {
			p.final = code
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

// session runs one socket and returns its close code (1006 when it ended
// without a close frame or could not open).
func (p *panelConsole) session(ctx context.Context) websocket.StatusCode {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	c, _, err := websocket.Dial(dctx, p.url, nil)
	cancel()
	if err != nil {
		return websocket.StatusAbnormalClosure
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	p.mu.Lock()
	p.conn = c
	p.opens++
	token := p.token
	p.mu.Unlock()
	p.write(ctx, c, "auth", token)
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			if code := websocket.CloseStatus(err); code != -1 {
				return code
			}
			return websocket.StatusAbnormalClosure
		}
		var m wsMsg
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		switch m.Event {
		case "auth success":
			p.mu.Lock()
			p.authed = true
			p.mu.Unlock()
		case "token expiring", "token expired":
			p.refresh(ctx, c)
		case "jwt error":
			p.mu.Lock()
			p.authed = false
			p.mu.Unlock()
			text := strings.ToLower(strings.Join(m.Args, ""))
			if slices.ContainsFunc(panelRefreshTexts, func(s string) bool { return strings.Contains(text, s) }) {
				p.refresh(ctx, c)
				continue
			}
			p.mu.Lock()
			p.refreshPage = append(p.refreshPage, text)
			p.mu.Unlock()
		}
	}
}

// refresh fetches a new token, stores it and authenticates with it.
func (p *panelConsole) refresh(ctx context.Context, c *websocket.Conn) {
	tok := p.mint()
	p.mu.Lock()
	p.token = tok
	p.mu.Unlock()
	p.write(ctx, c, "auth", tok)
}

func (p *panelConsole) write(ctx context.Context, c *websocket.Conn, event string, args ...string) {
	b, _ := json.Marshal(wsMsg{Event: event, Args: args})
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = c.Write(wctx, websocket.MessageText, b)
}

// state reports whether the current socket is authenticated, the close
// that ended reconnecting (0 while it goes on), and how many sockets were
// opened so far.
func (p *panelConsole) state() (authed bool, final websocket.StatusCode, opens int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.authed, p.final, p.opens
}

func (p *panelConsole) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("opens=%d authed=%v final=%d closes=%v refresh-page errors=%q", p.opens, p.authed, p.final, p.closes, p.refreshPage)
}

// waitAuthed fails unless the console is authenticated within d.
func (p *panelConsole) waitAuthed(d time.Duration) {
	p.t.Helper()
	wait.For(p.t, d, func() bool { authed, _, _ := p.state(); return authed }, "the panel's console to authenticate: %s", p)
}

// waitGivenUp fails unless the console's socket is closed for good (a
// close the panel does not reconnect after) within d, and no socket is
// opened in the following stay.
func (p *panelConsole) waitGivenUp(d, stay time.Duration) websocket.StatusCode {
	p.t.Helper()
	var final websocket.StatusCode
	var opens int
	wait.For(p.t, d, func() bool { _, final, opens = p.state(); return final != 0 }, "the panel's console to give up: %s", p)
	// Nothing to wait for: the check is that nothing happens for stay.
	time.Sleep(stay)
	if _, _, after := p.state(); after != opens {
		p.t.Fatalf("the console reopened its socket: %s", p)
	}
	return final
}
