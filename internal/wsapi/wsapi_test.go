package wsapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/testutil/wait"
	"github.com/wharf/wharf/internal/tokens"
)

const (
	testKey    = "unit-node-token"
	testServer = "3c5d7e9f-1a2b-4c3d-9e4f-5a6b7c8d9e0f"
)

// fakeServer implements Server without Docker.
type fakeServer struct {
	bus *events.Bus
	mu  sync.Mutex
	cmd []string
	n   int
}

func (f *fakeServer) UUID() string         { return testServer }
func (f *fakeServer) Events() *events.Bus  { return f.bus }
func (f *fakeServer) State() server.State  { return server.Running }
func (f *fakeServer) IsSuspended() bool    { return false }
func (f *fakeServer) IsInstalling() bool   { return false }
func (f *fakeServer) IsTransferring() bool { return false }
func (f *fakeServer) Utilization() server.Utilization {
	return server.Utilization{State: server.Running}
}
func (f *fakeServer) PowerAsync(server.PowerAction, time.Duration) error {
	return nil
}
func (f *fakeServer) ConsoleLines(n int) []string { return []string{"a", "b"} }
func (f *fakeServer) SendCommand(line string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmd = append(f.cmd, line)
	return nil
}
func (f *fakeServer) AddSession(server.Session) func() {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	return func() { f.mu.Lock(); f.n--; f.mu.Unlock() }
}

// setup starts a hub behind an HTTP server; stop ends both (call it before
// goleak looks).
func setup(t *testing.T, opts Options) (*Hub, *fakeServer, string, func()) {
	t.Helper()
	boot := time.Now().Add(-time.Hour)
	opts.Verifier = tokens.NewVerifier(func() []byte { return []byte(testKey) }, nil)
	opts.Denylist = tokens.NewDenylist(boot)
	h := NewHub(opts)
	srv := &fakeServer{bus: events.NewBus()}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		release, ok := h.Reserve(srv.UUID())
		if !ok {
			http.Error(w, "too many", http.StatusBadRequest)
			return
		}
		defer release()
		sock, err := Accept(w, r, nil)
		if err != nil {
			return
		}
		h.Serve(r.Context(), sock, srv, "192.0.2.1")
	}))
	stop := func() {
		h.Close()
		hs.Close()
	}
	return h, srv, "ws" + strings.TrimPrefix(hs.URL, "http"), stop
}

func token(t *testing.T, perms ...string) string {
	t.Helper()
	p := make([]any, len(perms))
	for i, s := range perms {
		p[i] = s
	}
	tok, err := tokens.Sign([]byte(testKey), map[string]any{
		"user_uuid": "u1", "server_uuid": testServer, "permissions": p, "jti": "j",
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.Dial(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(-1)
	return c
}

func send(t *testing.T, c *websocket.Conn, event string, args ...string) {
	t.Helper()
	if args == nil {
		args = []string{}
	}
	b, _ := json.Marshal(message{Event: event, Args: args})
	if err := c.Write(context.Background(), websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
}

func readUntil(t *testing.T, c *websocket.Conn, event string) message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for %q: %v", event, err)
		}
		var m message
		_ = json.Unmarshal(data, &m)
		if m.Event == event {
			return m
		}
	}
}

// TestWebsocketNoGoroutineLeft: sockets that authenticate, receive events,
// get closed by either side or by the hub leave no goroutine behind.
func TestWebsocketNoGoroutineLeft(t *testing.T) {
	defer goleak.VerifyNone(t)
	func() {
		h, srv, url, stop := setup(t, Options{})
		defer stop()
		var conns []*websocket.Conn
		for range 5 {
			c := dial(t, url)
			send(t, c, "auth", token(t, "*"))
			readUntil(t, c, EventAuthSuccess)
			conns = append(conns, c)
		}
		srv.bus.Publish(events.New(events.ConsoleOutput, "hello"))
		for _, c := range conns {
			readUntil(t, c, events.ConsoleOutput)
		}
		conns[0].Close(websocket.StatusNormalClosure, "")
		send(t, conns[1], "send command", "say hi")
		send(t, conns[1], "send stats")
		readUntil(t, conns[1], events.Stats)
		// One unauthenticated socket, closed by the hub with the rest.
		dial(t, url)
		wait.For(t, 10*time.Second, func() bool { return h.Count(testServer) == 5 }, "5 sessions registered")
		h.Close()
		for _, c := range conns[1:] {
			// Frames queued before the close (status, stats) may still come first.
			var err error
			for err == nil {
				_, _, err = c.Read(context.Background())
			}
			if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
				t.Fatalf("hub close: %v", err)
			}
		}
		if srv.n != 0 || srv.bus.Subscribers() != 0 {
			t.Fatalf("%d sessions, %d subscriptions left", srv.n, srv.bus.Subscribers())
		}
	}()
}

// TestWebsocketSlowClientDropped: a client that stops reading is closed
// while another keeps receiving, and the publisher never blocks.
func TestWebsocketSlowClientDropped(t *testing.T) {
	defer goleak.VerifyNone(t)
	func() {
		h, srv, url, stop := setup(t, Options{SlowClient: time.Second, WriteTimeout: 2 * time.Second, QueueSize: func() int { return 64 }})
		defer stop()
		idle, reader := dial(t, url), dial(t, url)
		send(t, idle, "auth", token(t, "*"))
		send(t, reader, "auth", token(t, "*"))
		readUntil(t, reader, EventAuthSuccess)
		wait.For(t, 10*time.Second, func() bool { return srv.bus.Subscribers() == 2 }, "both clients subscribed")
		got := make(chan int, 1)
		go func() {
			n := 0
			for {
				_, _, err := reader.Read(context.Background())
				if err != nil {
					got <- n
					return
				}
				n++
			}
		}()
		line := strings.Repeat("x", 60000)
		start := time.Now()
		// Every poll publishes one more line until the idle client is dropped.
		wait.For(t, 30*time.Second, func() bool {
			srv.bus.Publish(events.New(events.ConsoleOutput, line))
			return srv.bus.Subscribers() != 2
		}, "the idle client to be dropped")
		t.Logf("idle client dropped after %s", time.Since(start))
		// The subscription ends first; the session unregisters right after.
		wait.For(t, 10*time.Second, func() bool { return h.Count(testServer) == 1 }, "the idle session unregistered")
		srv.bus.Publish(events.New(events.ConsoleOutput, "after"))
		h.Close()
		if n := <-got; n < 10 {
			t.Fatalf("the reading client received only %d frames", n)
		}
	}()
}

// TestWebsocketPermissions checks the permission table.
func TestWebsocketPermissions(t *testing.T) {
	all := newPermissions([]string{"*"})
	for _, p := range []string{PermConsole, PermStart, PermStop, PermRestart, PermInstall, PermTransfer, PermBackupRead} {
		if !all.has(p) {
			t.Errorf("* lacks %s", p)
		}
	}
	if all.has(PermDetailedError) {
		t.Error("* grants admin.websocket.errors")
	}
	legacy := newPermissions([]string{"admin.websocket.install", "admin.websocket.transfer", "admin.websocket.errors"})
	if !legacy.has(PermInstall) || !legacy.has(PermTransfer) || !legacy.has(PermDetailedError) || legacy.has(PermConsole) {
		t.Errorf("legacy permissions not normalised: %+v", legacy)
	}
	if powerPermission("kill") != PermStop || powerPermission("restart") != PermRestart {
		t.Error("power permission map")
	}
	for ev, want := range map[string]string{"install output": PermInstall, "transfer logs": PermTransfer,
		"backup completed:abc": PermBackupRead, "backup completed": PermBackupRead, "console output": "", "install started": ""} {
		if got := eventPermission(ev); got != want {
			t.Errorf("eventPermission(%q) = %q, want %q", ev, got, want)
		}
	}
}

// TestWebsocketTokenExpiringRepeats: `token expiring` comes when the
// warning window opens and again every ExpiryRepeat until the token
// expires, so that a failed refresh in the panel is retried.
func TestWebsocketTokenExpiringRepeats(t *testing.T) {
	defer goleak.VerifyNone(t)
	func() {
		_, _, url, stop := setup(t, Options{ExpiryWarning: time.Minute, ExpiryRepeat: 300 * time.Millisecond})
		defer stop()
		c := dial(t, url)
		defer c.CloseNow()
		tok, err := tokens.Sign([]byte(testKey), map[string]any{
			"user_uuid": "u1", "server_uuid": testServer, "permissions": []any{"*"}, "jti": "j",
			"iat": time.Now().Unix(), "exp": time.Now().Add(3 * time.Second).Unix(),
		})
		if err != nil {
			t.Fatal(err)
		}
		send(t, c, "auth", tok)
		expiring := 0
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, data, err := c.Read(ctx)
			cancel()
			if err != nil {
				t.Fatalf("socket ended before token expired (%d token expiring): %v", expiring, err)
			}
			var m message
			_ = json.Unmarshal(data, &m)
			if m.Event == EventTokenExpiring {
				expiring++
			}
			if m.Event == EventTokenExpired {
				break
			}
		}
		// The token lives 2-3 s: a notice at once, then every 300 ms.
		if expiring < 5 {
			t.Fatalf("%d token expiring before token expired, want one every 300 ms", expiring)
		}
	}()
}

// TestWebsocketJWTErrorTexts: the two refusals the panel recovers from
// carry the texts it looks for.
func TestWebsocketJWTErrorTexts(t *testing.T) {
	defer goleak.VerifyNone(t)
	func() {
		_, _, url, stop := setup(t, Options{})
		defer stop()
		for name, tc := range map[string]struct {
			iat, exp time.Time
			want     string
		}{
			"expired":     {time.Now(), time.Now().Add(-time.Second), "jwt: exp claim is invalid"},
			"before boot": {time.Now().Add(-2 * time.Hour), time.Now().Add(time.Hour), "jwt: created too far in past (denylist)"},
		} {
			c := dial(t, url)
			tok, err := tokens.Sign([]byte(testKey), map[string]any{
				"user_uuid": "u1", "server_uuid": testServer, "permissions": []any{"*"}, "jti": "j",
				"iat": tc.iat.Unix(), "exp": tc.exp.Unix(),
			})
			if err != nil {
				t.Fatal(err)
			}
			send(t, c, "auth", tok)
			m := readUntil(t, c, EventJWTError)
			if len(m.Args) != 1 || !strings.HasPrefix(m.Args[0], tc.want) {
				t.Errorf("%s: jwt error %q, want it to start with %q", name, m.Args, tc.want)
			}
			c.CloseNow()
		}
	}()
}

// TestQueueSizeReadLive: the cap of a socket's queue follows the option's
// function at every call (POST /api/update applies without a restart).
func TestQueueSizeReadLive(t *testing.T) {
	var size atomic.Int64
	h := NewHub(Options{QueueSize: func() int { return int(size.Load()) }})
	if got := h.queueSize(); got != DefaultQueueSize {
		t.Fatalf("queue size %d with the option at 0, want the default %d", got, DefaultQueueSize)
	}
	size.Store(4000)
	if got := h.queueSize(); got != 4000 {
		t.Fatalf("queue size %d after a change to 4000", got)
	}
}
