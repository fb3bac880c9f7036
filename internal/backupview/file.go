package backupview

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/wharf/wharf/internal/chunkstore"
)

// An open file caches decoded chunks up to cacheBytes (at least one
// chunk; chunks are 128 KiB on average, 2 MiB at most): what an SFTP
// client's out-of-order reads of neighbouring ranges need. A read that
// follows the previous one reads the next stretch of up to batchBytes of
// chunks at once (ranged reads of neighbours in a pack together). That is
// the file's whole memory, whatever the file's or the backup's size.
const (
	cacheBytes = 4 << 20
	batchBytes = 1 << 20
)

// File is a regular file of a backup open for reading (io.ReaderAt over
// the chunks that hold it; only those are read, each when a read needs
// it). Close releases it.
type File struct {
	info     Info
	st       *chunkstore.Store
	t        *tree
	n        *node
	data     int64 // offset of the content in the stream; -1: sparse (read in order)
	mu       sync.Mutex
	cache    []cached
	seq      *seqReader
	cached   int64 // bytes in cache
	last     int   // the last chunk read from the store
	endChunk int   // one past the file's last chunk
}

type cached struct {
	i int
	b []byte
}

// Stat describes the file.
func (f *File) Stat() Info { return f.info }

// Size is the file's length.
func (f *File) Size() int64 { return f.info.Size() }

func openFile(st *chunkstore.Store, t *tree, n *node, info Info) (*File, error) {
	f := &File{info: info, st: st, t: t, n: n, data: -1}
	if n.entry < 0 || n.end <= n.entry {
		if n.size == 0 {
			return f, nil
		}
		return nil, fmt.Errorf("backup view: %s has no entry", n.rel)
	}
	f.last = -2
	f.endChunk, _ = slices.BinarySearch(t.starts, n.end)
	h, hdrLen, err := f.header()
	if err != nil {
		return nil, err
	}
	if !isSparse(h) {
		f.data = n.entry + hdrLen
	}
	return f, nil
}

func isSparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// seqReader reads an entry's content in order.
type seqReader struct {
	rc  io.ReadCloser
	tr  *tar.Reader
	pos int64
}

func (s *seqReader) Close() { s.rc.Close() }

// header reads the file's tar header and its length in the stream from
// the entry's first chunk(s) only (no read-ahead), which it caches: the
// first read of the content needs them again.
func (f *File) header() (*tar.Header, int64, error) {
	i, found := slices.BinarySearch(f.t.starts, f.n.entry)
	if !found {
		i--
	}
	lr := &chunkSeq{f: f, i: i, skip: f.n.entry - f.t.starts[i]}
	cr := &counter{r: lr}
	h, err := tar.NewReader(cr).Next()
	if err != nil {
		return nil, 0, fmt.Errorf("backup view: reading the entry of %s: %w", f.n.rel, err)
	}
	return h, cr.n, nil
}

// chunkSeq reads the stream from chunk i (less skip bytes) one chunk at
// a time, through the file's cache.
type chunkSeq struct {
	f    *File
	i    int
	skip int64
	buf  []byte
}

func (c *chunkSeq) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		if c.i >= c.f.endChunk || c.i >= len(c.f.t.m.Chunks) {
			return 0, io.EOF
		}
		b, err := c.f.chunk(c.i)
		if err != nil {
			return 0, err
		}
		c.i++
		c.buf, c.skip = b[min(c.skip, int64(len(b))):], max(0, c.skip-int64(len(b)))
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// openEntry opens the file's tar entry: a reader positioned at the start
// of its content, its header and the header's length in the stream.
func (f *File) openEntry() (*seqReader, *tar.Header, int64, error) {
	cs, first := f.t.chunksOf(f.n.entry, f.n.end)
	rc := f.st.ChunkReader(cs)
	cr := &counter{r: rc}
	if _, err := io.CopyN(io.Discard, cr, f.n.entry-first); err != nil {
		rc.Close()
		return nil, nil, 0, err
	}
	tr := tar.NewReader(cr)
	h, err := tr.Next()
	if err != nil {
		rc.Close()
		return nil, nil, 0, fmt.Errorf("backup view: reading the entry of %s: %w", f.n.rel, err)
	}
	return &seqReader{rc: rc, tr: tr}, h, cr.n - (f.n.entry - first), nil
}

// ReadAt reads len(p) bytes at off of the file's content.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("backup view: negative offset")
	}
	size := f.Size()
	if off >= size {
		return 0, io.EOF
	}
	want := int(min(int64(len(p)), size-off))
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int
	var err error
	if f.data < 0 {
		n, err = f.readSeq(p[:want], off)
	} else {
		n, err = f.readChunks(p[:want], off)
	}
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

// readChunks reads p at off from the chunks that hold it.
func (f *File) readChunks(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		pos := f.data + off + int64(n)
		i, found := slices.BinarySearch(f.t.starts, pos)
		if !found {
			i--
		}
		b, err := f.chunk(i)
		if err != nil {
			return n, err
		}
		n += copy(p[n:], b[pos-f.t.starts[i]:])
	}
	return n, nil
}

// chunk returns chunk i of the stream, from the file's small cache.
func (f *File) chunk(i int) ([]byte, error) {
	for j, c := range f.cache {
		if c.i == i {
			if j > 0 { // most recent first
				copy(f.cache[1:j+1], f.cache[:j])
				f.cache[0] = c
			}
			return c.b, nil
		}
	}
	b, err := f.fetch(i)
	if err != nil {
		return nil, err
	}
	f.remember(i, b)
	return b, nil
}

// fetch reads chunk i: with the stretch after it when the reads are
// sequential (i follows the last chunk read), else on its own.
func (f *File) fetch(i int) ([]byte, error) {
	sequential := i == f.last+1
	f.last = i
	if !sequential {
		return f.st.ReadChunk(f.t.m.Chunks[i])
	}
	j, n := i, int64(0)
	for j < max(f.endChunk, i+1) && (j == i || n+f.t.m.Chunks[j].Len <= batchBytes) {
		n += f.t.m.Chunks[j].Len
		j++
	}
	bs, err := f.st.ReadChunks(f.t.m.Chunks[i:j], batchBytes)
	if err != nil {
		return nil, err
	}
	for k := len(bs) - 1; k > 0; k-- {
		f.remember(i+k, bs[k])
	}
	f.last = j - 1
	return bs[0], nil
}

// remember caches chunk i (most recent first), evicting the least
// recently used beyond cacheBytes.
func (f *File) remember(i int, b []byte) {
	f.cache = append(f.cache, cached{})
	copy(f.cache[1:], f.cache[:len(f.cache)-1])
	f.cache[0] = cached{i, b}
	f.cached += int64(len(b))
	for len(f.cache) > 1 && f.cached > cacheBytes {
		last := len(f.cache) - 1
		f.cached -= int64(len(f.cache[last].b))
		f.cache = f.cache[:last]
	}
}

// readSeq reads p at off of a sparse file, in order: a read behind the
// last one opens the entry again.
func (f *File) readSeq(p []byte, off int64) (int, error) {
	if f.seq != nil && off < f.seq.pos {
		f.seq.Close()
		f.seq = nil
	}
	if f.seq == nil {
		sr, _, _, err := f.openEntry()
		if err != nil {
			return 0, err
		}
		f.seq = sr
	}
	if d := off - f.seq.pos; d > 0 {
		k, err := io.CopyN(io.Discard, f.seq.tr, d)
		f.seq.pos += k
		if err != nil {
			return 0, err
		}
	}
	n, err := io.ReadFull(f.seq.tr, p)
	f.seq.pos += int64(n)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}

// Close releases the file.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seq != nil {
		f.seq.Close()
		f.seq = nil
	}
	f.cache, f.cached = nil, 0
	return nil
}
