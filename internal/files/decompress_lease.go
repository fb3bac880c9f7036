package files

import (
	"encoding/binary"
	"io"
	"sync"

	"github.com/wharf/wharf/internal/sandbox"
)

// The isolated child writes through its own sandbox, whose count of the
// server's usage is its own: it gets the server's disk limit in shares
// (leases), each reserved in the daemon's count (sandbox.FS.Reserve) before
// the child may write it, so that the child, the daemon's other writers
// (SFTP, uploads) and other decompressions (file jobs run together) share
// one limit, as they did when extraction ran in the daemon. A share is at
// least leaseChunk, so asking costs little; the daemon gives back what was
// reserved when the child ends, and recounts the usage from the disk.
const (
	leaseChunk = 32 << 20
	// entryMargin is asked for before each entry is made: what the sandbox
	// counts for an entry of no size (a filesystem block or more).
	entryMargin = 64 << 10
)

// leaser is the daemon's side: it answers the child's requests, on a
// socket, with the bytes it reserved for it (0: they do not fit).
type leaser struct {
	fsys    *sandbox.FS
	granted int64
}

// grant reserves between need and max(need, leaseChunk) bytes, as many as
// fit; 0 when need does not.
func (l *leaser) grant(need int64) int64 {
	want := max(need, leaseChunk)
	for range 3 { // another writer may take some between the two reads
		lim := l.fsys.DiskLimit()
		switch {
		case lim < 0:
			return 0
		case lim == 0: // the limit was lifted meanwhile
			return want
		}
		g := min(want, lim-l.fsys.Usage())
		if g < need || g <= 0 {
			return 0
		}
		if l.fsys.Reserve(g) == nil {
			l.granted += g
			return g
		}
	}
	return 0
}

// serve answers requests (an int64 each way, little-endian) until the
// child's end of the socket is closed.
func (l *leaser) serve(conn io.ReadWriter) {
	for {
		var need int64
		if binary.Read(conn, binary.LittleEndian, &need) != nil {
			return
		}
		if binary.Write(conn, binary.LittleEndian, l.grant(need)) != nil {
			return
		}
	}
}

// release gives back everything granted.
func (l *leaser) release() { l.fsys.Release(l.granted) }

// budget is the child's side: before a write or a new entry it makes sure
// its sandbox's limit (its leases so far) has room, asking the daemon for
// more when not. Nil (an extraction in the daemon) asks nothing.
type budget struct {
	mu   sync.Mutex
	fsys *sandbox.FS
	conn io.ReadWriter
}

// ensure asks for n more bytes of room when the sandbox has less; when the
// daemon has none to give, the write that follows fails as out of space.
func (b *budget) ensure(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	lim := b.fsys.DiskLimit()
	if lim <= 0 { // unlimited, or nothing was left when the child started
		return
	}
	room := lim - b.fsys.Usage()
	if room >= n {
		return
	}
	var g int64
	if binary.Write(b.conn, binary.LittleEndian, n-room) != nil || binary.Read(b.conn, binary.LittleEndian, &g) != nil {
		return
	}
	if g > 0 {
		b.fsys.SetDiskLimit(lim + g)
	}
}

// budgetWriter makes room before each write.
type budgetWriter struct {
	w io.Writer
	b *budget
}

func (bw budgetWriter) Write(p []byte) (int, error) {
	bw.b.ensure(int64(len(p)))
	return bw.w.Write(p)
}
