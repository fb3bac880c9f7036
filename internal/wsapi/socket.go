package wsapi

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"
)

// Socket is an accepted websocket whose outbound frames can be coalesced:
// the frames a session writes between cork and flush leave the process in
// one write (one system call) instead of one each.
type Socket struct {
	conn *websocket.Conn
	out  *corkWriter
	in   *socketInput
}

// Accept upgrades the request (websocket.Accept with opts) and returns a
// Socket for Hub.Serve. On failure Accept has answered the client.
func Accept(w http.ResponseWriter, r *http.Request, opts *websocket.AcceptOptions) (*Socket, error) {
	h := &corkHijacker{ResponseWriter: w}
	c, err := websocket.Accept(h, r, opts)
	if err != nil {
		return nil, err
	}
	if h.out == nil { // Accept hijacks or fails
		_ = c.CloseNow()
		return nil, errors.New("websocket accepted without hijacking the connection")
	}
	return &Socket{conn: c, out: h.out, in: h.in}, nil
}

// Sizes of a socket's own buffered reader and writer. Small: inbound frames
// are at most a few KiB and rare, and outbound frames are gathered by the
// corkWriter, so larger buffers would only cost memory on every socket.
const (
	socketReadBuffer  = 128
	socketWriteBuffer = 64
)

// socketSendBuffer is the kernel's send buffer of a websocket connection
// (SO_SNDBUF; Linux doubles it). Left to its autotuning it grows to
// megabytes: a client that reads slower than the console prints would
// find seconds of old lines there, out of reach of the queue's skipping
// of old lines. This is about 800 console lines: enough for a client
// that keeps up, and a bound on the delay of one that does not.
const socketSendBuffer = 32 << 10

// limitSendBuffer sets conn's kernel send buffer to socketSendBuffer
// when it is a TCP connection (directly or under TLS).
func limitSendBuffer(conn net.Conn) {
	if nc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = nc.NetConn()
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(socketSendBuffer)
	}
}

// corkHijacker hands the websocket library the hijacked connection with
// small buffers of its own (the HTTP server's 4 KiB ones are freed when the
// handler returns) and the writes redirected through a corkWriter.
type corkHijacker struct {
	http.ResponseWriter
	out *corkWriter
	in  *socketInput
}

func (h *corkHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// Bytes the client sent behind the upgrade request (its first frames)
	// are read before the connection's.
	limitSendBuffer(conn)
	pending, _ := brw.Reader.Peek(brw.Reader.Buffered())
	c := &hijackedConn{Conn: conn, pending: bytes.Clone(pending)}
	// Every byte from the client passes the pong filter once, these too.
	n, _ := c.pongs.filter(c.pending, nil)
	c.pending = c.pending[:n]
	h.out = &corkWriter{conn: conn}
	br := bufio.NewReaderSize(c, socketReadBuffer)
	h.in = newSocketInput(c, br)
	return c, bufio.NewReadWriter(br, bufio.NewWriterSize(h.out, socketWriteBuffer)), nil
}

// hijackedConn reads what the HTTP server had buffered before the
// connection itself, and takes the pongs of the console's pacing out of
// the client's bytes (pongFilter) before the websocket library reads them.
type hijackedConn struct {
	net.Conn
	pending []byte
	pongs   pongFilter
	onPong  func(payload []byte) // set before the session reads
}

func (c *hijackedConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.pending = nil
		}
		return n, nil
	}
	if c.pongs.bad {
		return 0, errBadPong
	}
	for {
		n, err := c.Conn.Read(p)
		if n == 0 {
			return 0, err
		}
		k, ferr := c.pongs.filter(p[:n], c.onPong)
		if ferr != nil {
			return k, ferr
		}
		// Only pongs: read on, since a read of nothing is no progress.
		if k > 0 || err != nil {
			return k, err
		}
	}
}

// takeAvailable reads what the socket has without blocking (fd is the
// connection's descriptor), through the pong filter, into pending; false
// when it read nothing that the library must see (only pongs, or no byte
// after all), so that the reader can go on waiting.
func (c *hijackedConn) takeAvailable(raw syscall.RawConn) bool {
	var buf [256]byte
	var n int
	var rerr error
	if err := raw.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf[:], unix.MSG_DONTWAIT)
		return true
	}); err != nil {
		return true // the library's Read reports it
	}
	switch {
	case rerr == unix.EAGAIN || rerr == unix.EINTR:
		return false
	case rerr != nil || n <= 0:
		return true // an end of file or an error: the library's Read finds it too
	}
	k, err := c.pongs.filter(buf[:n], c.onPong)
	if k > 0 {
		c.pending = append(c.pending, buf[:k]...)
	}
	return k > 0 || err != nil
}

// corkWriter passes writes through to the connection, except between cork
// and flush, when it gathers them for one write. Its buffer is released by
// release, so an idle socket holds none.
//
// It also follows the boundaries of the frames written through it, so that
// ping can put the console pacing's ping between two of the library's
// frames, and counts the bytes written (written).
type corkWriter struct {
	conn net.Conn

	mu      sync.Mutex
	corked  bool
	buf     []byte
	cur     frameCursor
	sent    uint64
	ping    [2 + pingIDLen]byte // a ping waiting for the end of a frame of another writer
	pingSet bool
}

// corkFlushAt: a batch this large is written without waiting for flush.
const corkFlushAt = 256 << 10

func (c *corkWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur.advance(p)
	c.sent += uint64(len(p))
	if !c.corked {
		n, err := c.conn.Write(p)
		if err == nil && c.pingSet && c.cur.atBoundary() {
			c.pingSet = false
			_, err = c.conn.Write(c.ping[:])
		}
		return n, err
	}
	c.buf = append(c.buf, p...)
	if c.pingSet && c.cur.atBoundary() {
		c.pingSet = false
		c.buf = append(c.buf, c.ping[:]...)
	}
	if len(c.buf) >= corkFlushAt {
		if err := c.writeLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// sendPing writes the ping frame f between two frames: now when no frame
// is being written (into the cork's buffer when corked), else as soon as
// the frame being written ends. Only the session's writer calls it, while
// corked; the library's other writes (the pongs it answers, a close frame)
// can be in the middle of a frame.
func (c *corkWriter) sendPing(f [2 + pingIDLen]byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cur.atBoundary() {
		c.ping, c.pingSet = f, true
		return nil
	}
	if c.corked {
		c.buf = append(c.buf, f[:]...)
		return nil
	}
	_, err := c.conn.Write(f[:])
	return err
}

// written reports how many bytes of frames were written through c, and
// whether a ping waits for the end of a frame.
func (c *corkWriter) written() (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent, c.pingSet
}

// cork starts gathering writes; every write to the connection until flush
// must end before deadline.
func (c *corkWriter) cork(deadline time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = true
	_ = c.conn.SetWriteDeadline(deadline)
}

// flush writes what was gathered since cork and ends the cork.
func (c *corkWriter) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	var err error
	if len(c.buf) > 0 {
		err = c.writeLocked()
	}
	_ = c.conn.SetWriteDeadline(time.Time{})
	return err
}

func (c *corkWriter) writeLocked() error {
	_, err := c.conn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

// release drops the buffer (an idle socket keeps none).
func (c *corkWriter) release() {
	c.mu.Lock()
	if !c.corked {
		c.buf = nil
	}
	c.mu.Unlock()
}
