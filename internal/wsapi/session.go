package wsapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
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

// closeMarker, queued after `token expired`, tells the writer to close the
// socket with CloseTokenExpired once the frames before it are written.
var closeMarker = events.Frame{}

// A session costs one goroutine while idle: the reader (the hub's goroutine
// started by Hub.Go, or the caller's in Hub.Serve). Everything bound for the client, the server's events and the
// session's own answers, goes through one queue that holds memory only while
// it has frames; a writer goroutine runs only while there is something to
// write, and writes every queued frame with one system call. Timers (auth
// timeout, token expiry) are runtime timers, not goroutines.
type session struct {
	hub  *Hub
	conn *websocket.Conn
	out  *corkWriter
	in   *socketInput
	srv  Server
	ip   string
	log  sessionLog

	// Closing: end starts it once; closed is closed when it is done.
	ended     atomic.Bool
	closeOnce sync.Once
	closed    chan struct{}
	q         *events.Queue

	closeMu     sync.Mutex
	closeCode   websocket.StatusCode
	closeReason string

	pace atomic.Pointer[pacer] // the console's pacing, from the first ping (pace.go)

	claims   atomic.Pointer[tokens.WebsocketClaims]
	outPerms atomic.Pointer[permissions] // what the server's events are filtered with

	// The writer: at most one runs; none is started once closing is set.
	wmu     sync.Mutex
	writing bool
	closing bool
	writers sync.WaitGroup

	// Timers, guarded by tmu; gen invalidates the callbacks of older tokens.
	tmu       sync.Mutex
	gen       uint64
	authTimer *time.Timer
	expiry    *time.Timer // token expiring, then token expired

	// Owned by the reader goroutine.
	perms permissions
	lim   *limiter
	authd bool
}

func newSession(h *Hub, sock *Socket, srv Server, ip string) *session {
	s := &session{
		hub: h, conn: sock.conn, out: sock.out, in: sock.in, srv: srv, ip: ip,
		closed: make(chan struct{}),
		lim:    newLimiter(),
	}
	s.q = events.NewQueue(h.queueSize, s.wants, s.kick)
	s.log = sessionLog{s}
	if sock.in != nil {
		sock.in.hc.onPong = s.pong
	}
	return s
}

// sessionLog logs with the session's server and remote address, built only
// when a line is logged: an idle socket keeps no logger of its own.
type sessionLog struct{ s *session }

func (l sessionLog) logger() *slog.Logger {
	return l.s.hub.opts.Log.With("server", l.s.srv.UUID(), "remote", l.s.ip)
}
func (l sessionLog) Debug(msg string, args ...any) { l.logger().Debug(msg, args...) }
func (l sessionLog) Info(msg string, args ...any)  { l.logger().Info(msg, args...) }
func (l sessionLog) Warn(msg string, args ...any)  { l.logger().Warn(msg, args...) }

// wants filters the server's events by the current token's permissions.
func (s *session) wants(event string) bool {
	p := eventPermission(event)
	if p == "" {
		return true
	}
	perms := s.outPerms.Load()
	return perms != nil && perms.has(p)
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
	s.end()
}

// end starts closing the socket, once: a goroutine waits for the writer in
// flight (it ends within WriteTimeout, so that the close frame is not cut
// into a frame being written), then sends the close frame, which also ends
// the reader.
func (s *session) end() {
	s.ended.Store(true)
	if p := s.pace.Load(); p != nil {
		p.signal() // a writer waiting for a pong
	}
	s.closeOnce.Do(func() { go s.closeConn() })
}

func (s *session) closeConn() {
	defer close(s.closed)
	s.wmu.Lock()
	s.closing = true
	s.wmu.Unlock()
	s.writers.Wait()
	s.closeMu.Lock()
	code, reason := s.closeCode, s.closeReason
	s.closeMu.Unlock()
	if code == 0 {
		code = websocket.StatusNormalClosure
	}
	// The close handshake reads the socket on this goroutine: the reader
	// stops looking at the same buffers first.
	s.in.stop()
	_ = s.conn.Close(code, reason)
}

// run serves the socket until it ends: the calling goroutine reads.
func (s *session) run() {
	s.conn.SetReadLimit(s.hub.opts.ReadLimit)
	remove := s.srv.AddSession(s)
	defer remove()
	if s.srv.IsSuspended() {
		s.Close(server.CloseSuspended, "server is suspended")
		<-s.closed
		return
	}
	s.tmu.Lock()
	s.authTimer = time.AfterFunc(s.hub.opts.AuthTimeout, func() {
		s.Close(CloseAuthTimeout, "authentication timed out")
	})
	s.tmu.Unlock()
	s.readLoop()
	s.end()
	<-s.closed
	s.q.Detach()
	s.tmu.Lock()
	s.gen++
	for _, t := range []*time.Timer{s.authTimer, s.expiry} {
		if t != nil {
			t.Stop()
		}
	}
	s.tmu.Unlock()
}

// readLoop reads the client's messages in order. The reader spends its life
// waiting for inbound bytes in a shallow call (socketInput), so that its
// stack stays at the runtime's minimum (a grown stack is never given back
// while the goroutine lives); reading a message (a dozen frames of the
// websocket library) and handling it (token checks, JSON, power actions)
// need a deep one, so they run on a goroutine of their own that ends with
// them, and the reader waits for it.
func (s *session) readLoop() {
	for {
		if s.in.wait() != nil {
			return
		}
		var ok bool
		if s.in.canWait() {
			done := make(chan bool, 1) // per message: an idle reader holds none
			go func() { done <- s.readMessage(false) }()
			ok = <-done
		} else {
			// Nothing to wait on (TLS): the reader blocks in Read itself.
			ok = s.readMessage(true)
		}
		if !ok || s.ended.Load() {
			return
		}
	}
}

// readMessage reads and handles one message (aside: on a goroutine of its
// own, waited for); false when reading must stop.
func (s *session) readMessage(aside bool) bool {
	// The read context never ends: the writer closes the connection, which
	// ends the read, so that its close frame can be sent first.
	typ, data, err := s.conn.Read(context.Background())
	if err != nil {
		if code := websocket.CloseStatus(err); code == websocket.StatusMessageTooBig {
			s.log.Debug("websocket closed: inbound frame over the limit")
		}
		return false
	}
	switch {
	case typ != websocket.MessageText:
	case aside:
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.inbound(data)
		}()
		<-done
	default:
		s.inbound(data)
	}
	return true
}

// inbound handles one text message.
func (s *session) inbound(data []byte) {
	var m message
	if json.Unmarshal(data, &m) != nil || m.Event == "" {
		return // invalid frames are ignored
	}
	if ok, notice := s.lim.allow(m.Event, s.hub.opts.Now()); !ok {
		if notice != "" {
			s.send(events.New(EventThrottled, notice))
		}
		return
	}
	s.handle(m)
}

// send queues one of the session's own answers for the writer.
func (s *session) send(ev events.Event) {
	s.q.Put(events.Encode(ev))
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
		s.send(events.New(EventJWTError, jwtErrorText(tokens.ErrExpired)))
		return
	}
	if err := s.hub.opts.Denylist.CheckWebsocket(c); err != nil {
		s.send(events.New(EventJWTError, jwtErrorText(err)))
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
		err = s.hub.opts.Denylist.CheckWebsocket(c)
	}
	if err != nil {
		s.log.Debug("websocket authentication refused", "reason", err)
		s.send(events.New(EventJWTError, jwtErrorText(err)))
		return
	}
	first := !s.authd
	s.authd = true
	s.claims.Store(c)
	// A ws/deny between the check above and the store is caught here:
	// Hub.CloseJTIs only sees stored claims.
	if s.hub.opts.Denylist.CheckWebsocket(c) != nil {
		s.Close(server.CloseRevoked, "token denied")
		return
	}
	s.perms = newPermissions(c.Permissions)
	perms := s.perms
	s.outPerms.Store(&perms)
	// `auth success` is queued before the expiry timers are armed, so that
	// an immediate `token expiring` cannot overtake it, and (on the first
	// auth) as the subscription to the server's events starts, so that
	// every event published after it reaches the client.
	success := events.Encode(events.New(EventAuthSuccess))
	if !first {
		s.q.Put(success)
		s.armExpiry(c.ExpiresAt)
		return
	}
	s.tmu.Lock()
	s.authTimer.Stop()
	s.authTimer = nil
	s.tmu.Unlock()
	if !s.srv.Events().Attach(s.q, success) {
		s.Close(server.CloseDeleted, "server deleted")
		return
	}
	s.armExpiry(c.ExpiresAt)
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

// armExpiry schedules `token expiring` ExpiryWarning before exp and every
// ExpiryRepeat after it while the token lives, then `token expired` and the
// close at exp, on one timer. A new token replaces the schedule.
func (s *session) armExpiry(exp time.Time) {
	// The timer's function reads the options through the hub: a copy of
	// them captured here would be kept on the heap of every socket.
	opts := &s.hub.opts
	s.tmu.Lock()
	defer s.tmu.Unlock()
	s.gen++
	gen := s.gen
	if s.expiry != nil {
		s.expiry.Stop()
	}
	untilExp := exp.Sub(opts.Now())
	atExp := untilExp <= 0 // the timer is set for exp itself
	fire := func() {
		s.tmu.Lock()
		defer s.tmu.Unlock()
		if gen != s.gen {
			return
		}
		left := exp.Sub(opts.Now())
		if atExp || left <= 0 {
			s.send(events.New(EventTokenExpired))
			s.q.Put(closeMarker)
			return
		}
		// Again while the token lives, so that one failed refresh in the
		// panel is retried.
		s.send(events.New(EventTokenExpiring))
		next := opts.ExpiryRepeat
		if next >= left {
			next, atExp = left, true
		}
		s.expiry.Reset(next)
	}
	s.expiry = time.AfterFunc(max(0, untilExp-opts.ExpiryWarning), fire)
}

// kick starts the writer unless it runs or the session is closing; the
// queue calls it when a frame lands in an empty queue.
func (s *session) kick() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.writing || s.closing {
		return
	}
	s.writing = true
	s.writers.Add(1)
	go s.writeLoop()
}

// writeLoop is the only writer of the connection while it runs: it writes
// what is queued, batch after batch, and ends when the queue is empty (or
// the session must close).
func (s *session) writeLoop() {
	defer s.writers.Done()
	var batch []events.Frame
	opts := &s.hub.opts
	marker := func(n int) events.Frame {
		return events.Encode(events.New(events.ConsoleOutput, opts.SkippedLine(n)))
	}
	for {
		batch = s.q.TakeRecent(batch, time.Now().Add(-opts.RecentAge), opts.RecentLines, marker)
		if len(batch) == 0 {
			if s.q.Gone() { // the bus closed: the server is gone
				s.Close(server.CloseDeleted, "server deleted")
				return
			}
			s.out.release()
			s.wmu.Lock()
			if s.q.Len() == 0 || s.closing {
				s.writing = false
				s.wmu.Unlock()
				s.q.Trim()
				return
			}
			s.wmu.Unlock()
			continue
		}
		// A client that reads slowly is not closed: its queue drops the
		// oldest lines and TakeRecent skips old ones (issue 38); one that
		// stops reading is closed by the write deadline.
		// Each slice waits for the socket, and for the client's window when
		// it is paced (pace.go); the lines of the rest that grew old
		// meanwhile are skipped before the next one (issue 38).
		for rest := batch; len(rest) > 0; {
			ok, waited := s.awaitWindow()
			if !ok {
				return
			}
			if waited {
				// What was queued meanwhile joins the rest, so that the
				// newest lines kept are the newest of both: the rest's
				// old lines are not written ahead of them.
				rest = append(rest, s.q.TakeRecent(nil, time.Now().Add(-opts.RecentAge), opts.RecentLines, marker)...)
			}
			rest = events.SkipOld(rest, time.Now().Add(-opts.RecentAge), opts.RecentLines, marker)
			n := min(len(rest), writeSlice)
			if !s.write(rest[:n]) {
				return
			}
			rest = rest[n:]
		}
	}
}

// writeSlice is how many frames are written under one write deadline, so
// that the deadline measures a client's progress rather than the time a
// slow client takes for a whole batch.
const writeSlice = 256

// pingCheck: how many frames the writer writes between two looks at
// whether the pacing's ping is due.
const pingCheck = 32

// write sends a batch of frames in one system call; false when the session
// must end.
func (s *session) write(batch []events.Frame) bool {
	// Not cut short by a close request: it lets the batch being written
	// finish, so that the close frame that follows is not lost.
	s.out.cork(time.Now().Add(s.hub.opts.WriteTimeout))
	var err error
	expired := false
	for i, f := range batch {
		if f.Data == nil { // closeMarker
			expired = true
			break
		}
		if err = s.conn.Write(context.Background(), websocket.MessageText, f.Data); err != nil {
			break
		}
		// The pacing's ping, when one is due, goes behind the frame
		// (every pingCheck frames, and after the last).
		if (i+1)%pingCheck == 0 || i == len(batch)-1 {
			if ping, ok := s.pingDue(); ok {
				if err = s.out.sendPing(ping); err != nil {
					break
				}
			}
		}
	}
	if ferr := s.out.flush(); err == nil {
		err = ferr
	}
	switch {
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		s.log.Info("websocket client does not read; closing it", "user", s.User())
		s.Close(CloseSlowClient, "client is not reading fast enough")
		return false
	case err != nil:
		s.end()
		return false
	case expired:
		s.Close(CloseTokenExpired, "token expired")
		return false
	}
	return true
}
