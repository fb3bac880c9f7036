package sftpd

import (
	"io"
	"sync"
)

// Issue 38 §1b: the SFTP channel's read side, buffered.
//
// pkg/sftp's request server reads each packet in two calls on the SSH
// channel (its 4-byte length, then its body), and x/crypto/ssh sends the
// client a window adjustment (an encrypted SSH message, a write(2)) on
// almost every Read of a channel that is receiving steadily. An upload of
// 32 KiB writes thus cost two adjustments per request. Reading the channel
// through a buffer of readBufSize takes whatever the client has already
// sent in one Read (one adjustment), and serves the next packet's length
// and body from it.
//
// The buffers come from a pool of the Server and go back as soon as they
// are drained, and a Read that would wait for the client with an empty
// buffer (a session between two requests, an idle session) reads the
// caller's few bytes directly: an idle session holds no buffer. A buffer is
// held across a wait only in the middle of a packet whose length the
// client announced (pkg/sftp has then allocated that packet's body
// already, up to 256 KiB), so the buffers in use are at most one per
// session that is sending.

// readBufSize is the size of one read buffer: two 32 KiB write requests,
// the size OpenSSH's and the Go client send.
const readBufSize = 64 << 10

// smallRead is the largest Read that an empty buffer serves directly
// (pkg/sftp's reads of a packet's length are 4 bytes).
const smallRead = 512

// readBufPool hands out read buffers of readBufSize.
type readBufPool struct{ p sync.Pool }

func newReadBufPool() *readBufPool {
	return &readBufPool{p: sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}}
}

func (p *readBufPool) get() *[]byte  { return p.p.Get().(*[]byte) }
func (p *readBufPool) put(b *[]byte) { p.p.Put(b) }

// bufferedChannel reads rwc through a pooled buffer and writes and closes it
// directly. Read is not safe for concurrent use (pkg/sftp reads from one
// goroutine); Write and Close are the channel's.
type bufferedChannel struct {
	io.ReadWriteCloser
	pool *readBufPool
	buf  *[]byte // nil when drained
	r, w int     // unread bytes are (*buf)[r:w]
}

func newBufferedChannel(rwc io.ReadWriteCloser, pool *readBufPool) *bufferedChannel {
	return &bufferedChannel{ReadWriteCloser: rwc, pool: pool}
}

func (c *bufferedChannel) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.buf == nil {
		if len(p) <= smallRead || len(p) >= readBufSize {
			return c.ReadWriteCloser.Read(p)
		}
		c.buf = c.pool.get()
		n, err := c.ReadWriteCloser.Read(*c.buf)
		if n == 0 {
			c.drop()
			return 0, err
		}
		c.r, c.w = 0, n
		// An error with data is returned by the next Read, from the
		// channel again (x/crypto returns it again: EOF stays EOF).
	}
	n := copy(p, (*c.buf)[c.r:c.w])
	c.r += n
	if c.r == c.w {
		c.drop()
	}
	return n, nil
}

// drop gives the buffer back to the pool.
func (c *bufferedChannel) drop() {
	if c.buf != nil {
		c.pool.put(c.buf)
		c.buf, c.r, c.w = nil, 0, 0
	}
}
