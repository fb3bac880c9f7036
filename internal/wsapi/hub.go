// Package wsapi is the per-server websocket console: authentication with
// the panel's JWTs, permissions, inbound events (power, commands, log
// replay, stats), outbound event fan-out from the server's event bus, and
// the limits that keep one client from hurting the server or the others
// (sockets per server, frame size, inbound rate, bounded send queues).
//
// The HTTP layer upgrades the connection (internal/httpapi) and hands it to
// Hub.Go, which serves the session on a goroutine of the hub so that the
// HTTP handler returns at once; Hub.Close closes every socket and waits
// until every goroutine of every session has ended.
package wsapi

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/tokens"
)

// Server is what a websocket session needs of a server; *server.Server
// implements it.
type Server interface {
	UUID() string
	Events() *events.Bus
	State() server.State
	IsSuspended() bool
	IsInstalling() bool
	IsTransferring() bool
	Utilization() server.Utilization
	PowerAsync(a server.PowerAction, wait time.Duration) error
	SendCommand(line string) error
	ConsoleLines(n int) []string
	AddSession(sess server.Session) (remove func())
}

// ActivityRecorder queues activity records for the backend (internal/activity).
type ActivityRecorder interface {
	Record(a panel.Activity)
}

// Defaults of the Options that are left zero.
const (
	DefaultMaxPerServer  = 30
	DefaultReadLimit     = 4096
	DefaultAuthTimeout   = 10 * time.Second
	DefaultExpiryWarning = 60 * time.Second
	DefaultExpiryRepeat  = 30 * time.Second
	DefaultSlowClient    = 5 * time.Second
	DefaultWriteTimeout  = 10 * time.Second
	DefaultQueueSize     = 512
	DefaultLogCount      = 150
	// DefaultRecentAge and DefaultRecentLines: a socket's console lines
	// that waited longer than this in its queue are skipped, except the
	// newest DefaultRecentLines of a batch, behind a "N lines skipped"
	// marker (a client that cannot keep up sees the recent console).
	DefaultRecentAge   = 250 * time.Millisecond
	DefaultRecentLines = 100
)

// Options configure a Hub. Verifier and Denylist are required.
type Options struct {
	Verifier *tokens.Verifier
	Denylist *tokens.Denylist
	// Activity receives power actions and console commands; nil drops them.
	Activity ActivityRecorder
	// LogCount is how many console lines `send logs` replays
	// (system.websocket_log_count); DefaultLogCount when nil or <= 0.
	LogCount func() int
	Log      *slog.Logger
	Now      func() time.Time

	MaxPerServer  int           // sockets per server, including unauthenticated ones
	ReadLimit     int64         // largest inbound frame; a larger one closes the socket
	AuthTimeout   time.Duration // an unauthenticated socket is closed after this
	ExpiryWarning time.Duration // `token expiring` this long before exp
	ExpiryRepeat  time.Duration // and again this often until exp
	// SlowClient is no longer used: since issue 38 a slow socket's queue
	// drops its oldest console lines instead, and a socket that stops
	// reading is closed by WriteTimeout.
	SlowClient time.Duration
	// WriteTimeout bounds one frame write; a client that does not read is
	// closed when it passes.
	WriteTimeout time.Duration
	// QueueSize caps the server's events queued per socket, read at every
	// event (a configuration change applies at once); DefaultQueueSize when
	// nil or <= 0. A socket holds memory only for what is queued.
	QueueSize func() int
	// RecentAge and RecentLines bound the delay of the console lines
	// (DefaultRecentAge, DefaultRecentLines when zero): see
	// events.Queue.TakeRecent.
	RecentAge   time.Duration
	RecentLines int
	// PaceBudget bounds the console a client has not read yet (pace.go):
	// DefaultPaceBudget when zero; negative: no pacing (no pings).
	PaceBudget time.Duration
	paceWindow uint64 // tests: a fixed window instead of the adaptive one
	// SkippedLine is the console line that stands for n skipped ones;
	// events.SkippedText when nil.
	SkippedLine func(n int) string
}

// Hub owns every websocket session of the daemon.
type Hub struct {
	opts Options

	mu        sync.Mutex
	perServer map[string]int
	sessions  map[*session]struct{}
	closed    bool
	wg        sync.WaitGroup
}

// NewHub returns a Hub; zero options take their defaults.
func NewHub(opts Options) *Hub {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LogCount == nil {
		opts.LogCount = func() int { return DefaultLogCount }
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&opts.AuthTimeout, DefaultAuthTimeout)
	def(&opts.ExpiryWarning, DefaultExpiryWarning)
	def(&opts.ExpiryRepeat, DefaultExpiryRepeat)
	def(&opts.SlowClient, DefaultSlowClient)
	def(&opts.WriteTimeout, DefaultWriteTimeout)
	def(&opts.RecentAge, DefaultRecentAge)
	if opts.PaceBudget == 0 {
		opts.PaceBudget = DefaultPaceBudget
	}
	if opts.RecentLines <= 0 {
		opts.RecentLines = DefaultRecentLines
	}
	if opts.SkippedLine == nil {
		opts.SkippedLine = events.SkippedText
	}
	if opts.MaxPerServer <= 0 {
		opts.MaxPerServer = DefaultMaxPerServer
	}
	if opts.ReadLimit <= 0 {
		opts.ReadLimit = DefaultReadLimit
	}
	return &Hub{opts: opts, perServer: map[string]int{}, sessions: map[*session]struct{}{}}
}

// queueSize is the live cap of a socket's queue of server events.
func (h *Hub) queueSize() int {
	if h.opts.QueueSize != nil {
		if n := h.opts.QueueSize(); n > 0 {
			return n
		}
	}
	return DefaultQueueSize
}

// Reserve takes one of the server's socket slots before the upgrade; ok is
// false when all are taken (or the hub is closed). release must be called
// once the socket has ended.
func (h *Hub) Reserve(serverUUID string) (release func(), ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.perServer[serverUUID] >= h.opts.MaxPerServer {
		return nil, false
	}
	h.perServer[serverUUID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.perServer[serverUUID]--; h.perServer[serverUUID] <= 0 {
				delete(h.perServer, serverUUID)
			}
		})
	}, true
}

// Count reports how many sockets of the server are open or being opened.
func (h *Hub) Count(serverUUID string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.perServer[serverUUID]
}

// Sessions is the number of websocket sessions open now (upgraded and
// not yet ended, on every server), for the metrics.
func (h *Hub) Sessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// Serve runs one websocket session until it ends. When ctx ends, the
// socket is closed with 1012 (service restart).
func (h *Hub) Serve(ctx context.Context, sock *Socket, srv Server, ip string) {
	s := h.register(sock, srv, ip)
	if s == nil {
		return
	}
	h.serve(ctx, s)
}

// Go runs one websocket session in a goroutine of the hub, so that the
// HTTP handler can return and free what the HTTP server holds for the
// request (its goroutine's stack among it). release is called when the
// session has ended. Close ends the session.
func (h *Hub) Go(sock *Socket, srv Server, ip string, release func()) {
	s := h.register(sock, srv, ip)
	if s == nil {
		release()
		return
	}
	go func() {
		defer release()
		h.serve(context.Background(), s)
	}()
}

// register records a new session; nil (and the socket closed) when the
// hub is closed.
func (h *Hub) register(sock *Socket, srv Server, ip string) *session {
	s := newSession(h, sock, srv, ip)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		_ = sock.conn.Close(websocket.StatusServiceRestart, "daemon is shutting down")
		return nil
	}
	h.sessions[s] = struct{}{}
	h.wg.Add(1)
	return s
}

func (h *Hub) serve(ctx context.Context, s *session) {
	defer func() {
		h.mu.Lock()
		delete(h.sessions, s)
		h.mu.Unlock()
		h.wg.Done()
	}()
	// A context that never ends (Go's) needs no watch: Close ends those
	// sessions, and an idle socket keeps no AfterFunc of its own.
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { s.Close(int(websocket.StatusServiceRestart), "daemon is shutting down") })
		defer stop()
	}
	s.run()
}

// Close closes every open socket with 1012 (service restart), refuses new
// ones, and waits until all sessions have ended.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	all := make([]*session, 0, len(h.sessions))
	for s := range h.sessions {
		all = append(all, s)
	}
	h.mu.Unlock()
	for _, s := range all {
		s.Close(int(websocket.StatusServiceRestart), "daemon is shutting down")
	}
	h.wg.Wait()
}
