package wsapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/tokens"
	"github.com/wharf/wharf/internal/usererr"
)

// Inbound events.
const (
	eventAuth        = "auth"
	eventSetState    = "set state"
	eventSendCommand = "send command"
	eventSendLogs    = "send logs"
	eventSendStats   = "send stats"
)

// Outbound events of the session itself (the server's events are in
// internal/events).
const (
	EventAuthSuccess   = "auth success"
	EventTokenExpiring = "token expiring"
	EventTokenExpired  = "token expired"
	EventJWTError      = "jwt error"
	EventDaemonError   = "daemon error"
	EventThrottled     = "throttled"
)

// Close codes of the session's own making (server.CloseSuspended and
// server.CloseDeleted come from the server).
const (
	CloseAuthTimeout  = 4408 // no successful auth within Options.AuthTimeout
	CloseTokenExpired = 4401 // the token expired (the panel reconnects with a new one)
	CloseSlowClient   = int(websocket.StatusPolicyViolation)
)

// message is one frame, either direction.
type message struct {
	Event string   `json:"event"`
	Args  []string `json:"args"`
}

// outItem is what the reader hands to the writer: an event to write, or a
// new token to act on (subscribe, expiry timers, outbound permissions).
type outItem struct {
	ev    events.Event
	token *tokens.WebsocketClaims
}

type session struct {
	hub  *Hub
	conn *websocket.Conn
	srv  Server
	ip   string
	log  *slog.Logger

	ctx    context.Context // ends when the session must close
	cancel context.CancelFunc
	out    chan outItem

	closeMu     sync.Mutex
	closeCode   websocket.StatusCode
	closeReason string

	claims atomic.Pointer[tokens.WebsocketClaims]

	// Owned by the reader goroutine.
	perms permissions
	lim   *limiter
	authd bool
}

func newSession(h *Hub, conn *websocket.Conn, srv Server, ip string) *session {
	ctx, cancel := context.WithCancel(context.Background())
	return &session{
		hub: h, conn: conn, srv: srv, ip: ip,
		log:    h.opts.Log.With("server", srv.UUID(), "remote", ip),
		ctx:    ctx,
		cancel: cancel,
		out:    make(chan outItem, 64),
		lim:    newLimiter(),
	}
}

// User is the user of the current token ("" before authentication).
func (s *session) User() string {
	if c := s.claims.Load(); c != nil {
		return c.UserUUID
	}
	return ""
}

// Close asks the session to close with code and reason. It never blocks;
// the first request wins.
func (s *session) Close(code int, reason string) {
	s.closeMu.Lock()
	if s.closeCode == 0 {
		s.closeCode, s.closeReason = websocket.StatusCode(code), reason
	}
	s.closeMu.Unlock()
	s.cancel()
}

// run serves the socket: the calling goroutine reads, a second one writes.
func (s *session) run() {
	defer s.cancel()
	s.conn.SetReadLimit(s.hub.opts.ReadLimit)
	remove := s.srv.AddSession(s)
	defer remove()
	if s.srv.IsSuspended() && !s.srv.IsRestoring() {
		_ = s.conn.Close(server.CloseSuspended, "server is suspended")
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.writeLoop()
		s.closeMu.Lock()
		code, reason := s.closeCode, s.closeReason
		s.closeMu.Unlock()
		if code == 0 {
			code = websocket.StatusNormalClosure
		}
		_ = s.conn.Close(code, reason)
	}()
	s.readLoop()
	s.cancel()
	<-done
}

func (s *session) readLoop() {
	for {
		// The read context never ends: the writer closes the connection,
		// which ends the read, so that its close frame can be sent first.
		typ, data, err := s.conn.Read(context.Background())
		if err != nil {
			if code := websocket.CloseStatus(err); code == websocket.StatusMessageTooBig {
				s.log.Debug("websocket closed: inbound frame over the limit")
			}
			return
		}
		if typ != websocket.MessageText {
			continue
		}
		var m message
		if json.Unmarshal(data, &m) != nil || m.Event == "" {
			continue // invalid frames are ignored
		}
		if ok, notice := s.lim.allow(m.Event, s.hub.opts.Now()); !ok {
			if notice != "" {
				s.send(events.New(EventThrottled, notice))
			}
			continue
		}
		s.handle(m)
		if s.ctx.Err() != nil {
			return
		}
	}
}

// send queues an event for the writer; it waits while the queue is full
// (the writer drains it or closes the socket within WriteTimeout).
func (s *session) send(ev events.Event) {
	select {
	case s.out <- outItem{ev: ev}:
	case <-s.ctx.Done():
	}
}

func (s *session) handle(m message) {
	if m.Event == eventAuth {
		s.authenticate(strings.Join(m.Args, ""))
		return
	}
	if !s.authd {
		s.send(events.New(EventJWTError, "authentication is required: send the auth event with a token first"))
		return
	}
	c := s.claims.Load()
	if !s.hub.opts.Now().Before(c.ExpiresAt) {
		s.send(events.New(EventJWTError, tokens.ErrExpired.Error()))
		return
	}
	if err := s.hub.opts.Denylist.Check(c.ServerUUID, c.UserUUID, c.IssuedAt); err != nil {
		s.send(events.New(EventJWTError, err.Error()))
		return
	}
	switch m.Event {
	case eventSetState:
		s.setState(c, strings.Join(m.Args, ""))
	case eventSendCommand:
		s.sendCommand(c, strings.Join(m.Args, ""))
	case eventSendLogs:
		for _, line := range s.srv.ConsoleLines(s.logCount()) {
			s.send(events.New(events.ConsoleOutput, line))
		}
	case eventSendStats:
		s.sendStats()
	}
	// Unknown events are ignored, as the panels' consoles expect.
}

func (s *session) logCount() int {
	if n := s.hub.opts.LogCount(); n > 0 {
		return n
	}
	return DefaultLogCount
}

// authenticate checks a token; a failure keeps the current token (if any).
func (s *session) authenticate(raw string) {
	c, err := s.hub.opts.Verifier.Websocket(raw)
	if err == nil && c.ServerUUID != strings.ToLower(s.srv.UUID()) {
		err = errors.New("token was issued for another server")
	}
	if err == nil {
		err = s.hub.opts.Denylist.Check(c.ServerUUID, c.UserUUID, c.IssuedAt)
	}
	if err != nil {
		s.log.Debug("websocket authentication refused", "reason", err)
		s.send(events.New(EventJWTError, err.Error()))
		return
	}
	first := !s.authd
	s.authd = true
	s.claims.Store(c)
	s.perms = newPermissions(c.Permissions)
	// The writer answers `auth success` when it takes the token, so that
	// nothing the new token triggers (an immediate `token expiring`) can
	// overtake it.
	select {
	case s.out <- outItem{token: c}:
	case <-s.ctx.Done():
		return
	}
	if !first {
		return
	}
	st := s.srv.State()
	s.send(events.New(events.Status, string(st)))
	if st == server.Offline && !s.srv.IsInstalling() && !s.srv.IsTransferring() {
		s.sendStats()
	}
}

func (s *session) sendStats() {
	b, err := json.Marshal(s.srv.Utilization())
	if err != nil {
		return
	}
	s.send(events.New(events.Stats, string(b)))
}

func (s *session) setState(c *tokens.WebsocketClaims, arg string) {
	action, err := server.ParsePowerAction(arg)
	if err != nil {
		s.daemonError(err)
		return
	}
	if !s.perms.has(powerPermission(string(action))) {
		s.daemonError(errPermission)
		return
	}
	if err := s.srv.PowerAsync(action, 0); err != nil {
		s.daemonError(err)
		return
	}
	s.activity(c, "server:power."+string(action), nil)
}

func (s *session) sendCommand(c *tokens.WebsocketClaims, line string) {
	if !s.perms.has(PermConsole) {
		s.daemonError(errPermission)
		return
	}
	if err := s.srv.SendCommand(line); err != nil {
		s.daemonError(err)
		return
	}
	s.activity(c, "server:console.command", map[string]any{"command": line})
}

func (s *session) activity(c *tokens.WebsocketClaims, event string, meta map[string]any) {
	if s.hub.opts.Activity == nil {
		return
	}
	if meta == nil {
		meta = map[string]any{}
	}
	user := c.UserUUID
	s.hub.opts.Activity.Record(panel.Activity{
		User: &user, Server: c.ServerUUID, Event: event, Metadata: meta,
		IP: s.ip, Timestamp: s.hub.opts.Now().UTC(),
	})
}

var errPermission = usererr.New(usererr.Forbidden, "you do not have permission to perform this action")

// daemonError tells the client why its request failed: a user error's
// message as it is (usererr); any other error only to a token with
// admin.websocket.errors, and otherwise logged with an id.
func (s *session) daemonError(err error) {
	if ue, ok := usererr.From(err); ok {
		s.send(events.New(EventDaemonError, ue.Message))
		return
	}
	if s.perms.has(PermDetailedError) {
		s.send(events.New(EventDaemonError, err.Error()))
		return
	}
	id := uuid.NewString()
	s.log.Warn("websocket request failed", "error_id", id, "error", err)
	s.send(events.New(EventDaemonError, "an unexpected error was encountered while handling this request (error "+id+")"))
}

// writeLoop is the only writer of the connection. It forwards the server's
// events (from the first successful auth on), the reader's answers, and the
// token expiry notices, and ends when the session must close.
func (s *session) writeLoop() {
	opts := s.hub.opts
	authTimer := time.NewTimer(opts.AuthTimeout)
	defer authTimer.Stop()
	var (
		sub                 *events.Subscription
		subC                <-chan events.Event
		perms               permissions
		expiring, expired   *time.Timer
		expiringC, expiredC <-chan time.Time
		watchdog            *time.Ticker
		watchdogC           <-chan time.Time
	)
	defer func() {
		if sub != nil {
			sub.Close()
		}
		if expiring != nil {
			expiring.Stop()
			expired.Stop()
		}
		if watchdog != nil {
			watchdog.Stop()
		}
	}()
	for {
		select {
		case <-s.ctx.Done():
			return
		case it := <-s.out:
			if c := it.token; c != nil {
				perms = newPermissions(c.Permissions)
				if sub == nil {
					authTimer.Stop()
					sub = s.srv.Events().Subscribe(opts.QueueSize)
					subC = sub.C
					watchdog = time.NewTicker(time.Second)
					watchdogC = watchdog.C
				}
				if !s.write(events.New(EventAuthSuccess)) {
					return
				}
				untilExp := c.ExpiresAt.Sub(opts.Now())
				untilWarn := max(0, untilExp-opts.ExpiryWarning)
				if expiring == nil {
					expiring, expired = time.NewTimer(untilWarn), time.NewTimer(untilExp)
					expiringC, expiredC = expiring.C, expired.C
				} else {
					expiring.Reset(untilWarn)
					expired.Reset(untilExp)
				}
				continue
			}
			if !s.write(it.ev) {
				return
			}
		case ev, ok := <-subC:
			if !ok { // the bus closed: the server is gone
				s.Close(server.CloseDeleted, "server deleted")
				return
			}
			if p := eventPermission(ev.Name); p != "" && !perms.has(p) {
				continue
			}
			if !s.write(ev) {
				return
			}
			if sub.FullFor() > opts.SlowClient {
				s.log.Info("websocket client falls behind; closing it", "user", s.User())
				s.Close(CloseSlowClient, "client is not reading fast enough")
				return
			}
		case <-watchdogC:
			if sub.FullFor() > opts.SlowClient {
				s.log.Info("websocket client falls behind; closing it", "user", s.User())
				s.Close(CloseSlowClient, "client is not reading fast enough")
				return
			}
		case <-authTimer.C:
			s.Close(CloseAuthTimeout, "authentication timed out")
			return
		case <-expiringC:
			if !s.write(events.New(EventTokenExpiring)) {
				return
			}
		case <-expiredC:
			_ = s.write(events.New(EventTokenExpired))
			s.Close(CloseTokenExpired, "token expired")
			return
		}
	}
}

// write sends one frame; false when the connection is unusable.
func (s *session) write(ev events.Event) bool {
	if ev.Args == nil {
		ev.Args = []string{}
	}
	b, err := json.Marshal(message{Event: ev.Name, Args: ev.Args})
	if err != nil {
		return true
	}
	// Not derived from s.ctx: a close request lets the frame being written
	// finish, so that the close frame that follows is not lost.
	ctx, cancel := context.WithTimeout(context.Background(), s.hub.opts.WriteTimeout)
	defer cancel()
	if err := s.conn.Write(ctx, websocket.MessageText, b); err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			s.log.Info("websocket client does not read; closing it", "user", s.User())
			s.Close(CloseSlowClient, "client is not reading fast enough")
		}
		return false
	}
	return true
}
