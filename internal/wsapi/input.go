package wsapi

import (
	"bufio"
	"errors"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketInput lets the session's reader goroutine wait for inbound bytes in
// a shallow call instead of deep inside the websocket library's Read (a
// dozen frames with defers down to the poller), so that the stack of an
// idle socket's only goroutine stays at the runtime's minimum. The wait
// peeks at the socket (MSG_PEEK) and consumes nothing: the library reads
// every byte, in order, as before.
//
// The bytes already buffered (by the HTTP server before the upgrade, or by
// the library's reader) are checked under mu; the session stops the waits
// (stop, under mu) before the library's close handshake reads from the
// same buffers on another goroutine.
type socketInput struct {
	raw syscall.RawConn // nil: the connection has no descriptor to peek at (TLS)
	hc  *hijackedConn
	br  *bufio.Reader

	mu      sync.Mutex
	stopped bool
}

func newSocketInput(hc *hijackedConn, br *bufio.Reader) *socketInput {
	in := &socketInput{hc: hc, br: br}
	if sc, ok := hc.Conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			in.raw = raw
		}
	}
	return in
}

// canWait reports whether wait can wait for input; when false (TLS: the
// bytes of a record may already be decrypted and buffered) wait returns at
// once and the reader blocks in the library's Read, as before.
func (in *socketInput) canWait() bool { return in.raw != nil }

// errInputStopped: the session is closing; the reader stops reading.
var errInputStopped = errors.New("websocket input stopped")

// wait returns when a read of the connection would not block: bytes are
// buffered or the socket has bytes, an end of file or an error. It returns
// errInputStopped once stop was called.
func (in *socketInput) wait() error {
	for {
		in.mu.Lock()
		if in.stopped {
			in.mu.Unlock()
			return errInputStopped
		}
		buffered := in.br.Buffered() > 0 || len(in.hc.pending) > 0
		in.mu.Unlock()
		if buffered || in.raw == nil {
			return nil
		}
		// A failure (the connection closed or reset) is left to the library's
		// Read, which reports it as it always did.
		_ = in.raw.Read(peekReady)
		// What came is read here, through the pong filter: the pongs of the
		// console's pacing are taken in this shallow call, and the reader
		// goes on waiting when they were all there was.
		in.mu.Lock()
		if in.stopped {
			in.mu.Unlock()
			return errInputStopped
		}
		more := in.hc.takeAvailable(in.raw)
		in.mu.Unlock()
		if more {
			return nil
		}
	}
}

// peekReady reports whether a read of fd would not block; false makes the
// runtime's poller wait until the descriptor is readable and ask again.
func peekReady(fd uintptr) bool {
	var b [1]byte
	_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return err != unix.EAGAIN
}

// stop makes wait return errInputStopped from now on; it returns once no
// wait looks at the buffers any more.
func (in *socketInput) stop() {
	in.mu.Lock()
	in.stopped = true
	in.mu.Unlock()
}
