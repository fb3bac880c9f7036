package transfer

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"

	"github.com/wharf/wharf/internal/sandbox"
)

// The wire of live transfers (docs/live-transfers.md is the contract;
// change both together, and bump LiveVersion on any change an older peer
// would misread).

// LiveVersion is the newest version of the live-transfer wire this build
// speaks; it speaks every version of liveVersions.
const LiveVersion = liveManifestVersion

// liveVersions are the versions this build speaks, oldest first: 2; 3,
// which adds the install log record; 4, which adds the sparse file and
// hard link records; 5, which adds the snapshot and seed records of live
// transfers by manifest (livemanifest.go), sent only to a target sharing
// the repository.
var liveVersions = []int{2, 3, 4, LiveVersion}

// SpeaksLive reports whether this build speaks live wire version v.
func SpeaksLive(v int) bool { return slices.Contains(liveVersions, v) }

// LiveProtocol names the protocol in the negotiation answer.
const LiveProtocol = "wharf-live-transfer"

// LiveContentType marks the body of a live transfer's POST (a classic
// transfer is always multipart/form-data).
const LiveContentType = "application/x-wharf-live-transfer"

// LiveVersionHeader carries the wire version of a live POST.
const LiveVersionHeader = "X-Wharf-Live-Transfer"

// Offer is a target's answer to the negotiation request.
type Offer struct {
	Protocol    string   `json:"protocol"`
	Versions    []int    `json:"versions"`
	Compression []string `json:"compression"`
	// Repository is the id of the target's backup repository when it is
	// shared with other nodes: a source sharing it transfers by manifest
	// (bymanifest.go, issue 36).
	Repository string `json:"repository,omitempty"`
}

// LiveOffer is what this build answers.
func LiveOffer() Offer {
	return Offer{Protocol: LiveProtocol, Versions: slices.Clone(liveVersions), Compression: []string{"zstd", "none"}}
}

// contentHash is a file's hash on the wire: XXH3-128 of its bytes. It
// guards the transfer against corruption and defects, not against the
// source (which chooses the bytes anyway, and whose record of what it sent
// never relies on it), so a fast non-cryptographic hash does: SHA-256 cost
// more CPU than anything else but the copies at both ends.
type contentHash = [16]byte

func newContentHash() *xxh3.Hasher128 { return xxh3.New128() }

// heldDir keeps the directory of the last file read or written open: the
// files of a directory come together in walk order, and through the held
// directory each costs one lookup instead of a walk from the root.
type heldDir struct {
	dir *sandbox.Dir
	rel string
}

// open returns the directory rel of fsys, open.
func (h *heldDir) open(fsys *sandbox.FS, rel string) (*sandbox.Dir, error) {
	if h.dir != nil && h.rel == rel {
		return h.dir, nil
	}
	h.close()
	d, err := fsys.OpenDir(rel)
	if err != nil {
		return nil, err
	}
	h.dir, h.rel = d, rel
	return d, nil
}

// close forgets the held directory.
func (h *heldDir) close() {
	if h.dir != nil {
		_ = h.dir.Close()
		h.dir = nil
	}
}

// liveMagic opens the body, in every version (the version is the POST's
// header).
const liveMagic = "WHARF-LIVE-2\n"

// Chunk codecs.
const (
	codecNone = 'N'
	codecZstd = 'Z'
)

// Record kinds.
const (
	recPass     = 'P' // uvarint pass, byte phase
	recDir      = 'D' // path, mode, mtime
	recFile     = 'F' // path, mode, mtime, size, bytes, hash
	recLink     = 'L' // path, target, mtime
	recDelete   = 'X' // path
	recManifest = 'M' // kind, path, mode, mtime, size, [hash], [target]
	recEnd      = 'E' // uvarint number of manifest records
	// Version 3: the server's install log (its last maxInstallLog bytes),
	// at most once, in the final phase before the manifest.
	recInstallLog = 'I' // uvarint length, bytes
	// Version 4: a file sent as its data extents (holes stay holes), and a
	// further name of a file this stream already wrote (livesparse.go).
	recSparse   = 'S' // path, mode, mtime, size, count, count × (offset, length, bytes), hash
	recHardLink = 'H' // path, path of the file it is a name of
)

// Phases named in a pass record.
const (
	phaseOnline = 1 // the server may be running; the target must not finish
	phaseFinal  = 2 // the server is stopped; a manifest and the end follow
)

// Limits a target enforces on a source's records.
const (
	maxChunk   = 4 << 20 // raw bytes of one chunk
	maxNameLen = 4096
	// maxFileSize bounds the size a file or sparse file record declares
	// (1 PiB, beyond any file system's file here).
	maxFileSize = 1 << 50
	// maxExtents bounds the data extents of one sparse file record; a
	// source merges the extents around the smallest holes past it.
	maxExtents = 16384
)

// chunkSize is the raw size of the chunks a source cuts.
const chunkSize = 1 << 20

// errBadStream marks a live body that does not follow the wire.
var errBadStream = fmt.Errorf("%w: not a valid live transfer stream", ErrBadArchive)

// hdrRoom is the room kept in front of every chunk for its frame header
// (codec and two uvarints), so that a frame goes out of the buffer it was
// filled in, without a copy.
const hdrRoom = 1 + 2*binary.MaxVarintLen64

// frameBuf is a frame ready to send (header and payload) and the buffer
// holding it, to reuse once sent.
type frameBuf struct {
	b   []byte
	buf []byte
}

// chunkWriter cuts the record stream into chunks and sends each one raw or
// zstd-compressed. Chunks are compressed in parallel and sent in order, by
// WriteTo (the HTTP client calls it with the connection's writer).
//
// In auto mode a chunk is compressed only while the link is the
// bottleneck: the sender is busy writing the previous chunks (not waiting
// for the next one, which would mean the CPU limits) and, where the kernel
// says so (linkBound, from TCP_INFO), the connection is held back by the
// network rather than by the receiver's window (a receiver that cannot keep
// up gains nothing from compression: it only adds work at both ends, and
// on one machine takes CPU the receiver needs).
type chunkWriter struct {
	mode      string
	enc       *zstd.Encoder
	buf       []byte      // hdrRoom, then the records of the chunk being filled
	free      chan []byte // sent chunk buffers, to reuse
	linkBound func() bool // nil: not known

	queue   chan chan frameBuf
	sem     chan struct{}
	waiting atomic.Bool // the sender waits for a chunk
	started atomic.Bool // send runs (or ran)
	done    chan error
	sent    atomic.Int64 // wire bytes written
	zchunks atomic.Int64
	chunks  atomic.Int64
	once    sync.Once
	err     error
	failed  atomic.Pointer[error]         // why nothing more can reach the target
	pr      atomic.Pointer[io.PipeReader] // Read's pipe, when a caller reads instead
}

// errBodyClosed: the HTTP client closed the body before the end (it gave
// up on the request).
var errBodyClosed = errors.New("the live transfer body was closed before its end")

// broken returns the error that stopped the sender, if any: the target
// answered or the connection broke, so nothing more can reach it.
func (c *chunkWriter) broken() error {
	if p := c.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// abort stops the stream: the sender drains what is queued without
// writing it and the writes of the records fail with err.
func (c *chunkWriter) abort(err error) { c.failed.CompareAndSwap(nil, &err) }

func newChunkWriter(mode string, linkBound func() bool) (*chunkWriter, error) {
	workers := max(1, runtime.GOMAXPROCS(0))
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(workers))
	if err != nil {
		return nil, err
	}
	c := &chunkWriter{
		mode: mode, enc: enc, linkBound: linkBound,
		free:  make(chan []byte, 2*workers+2),
		queue: make(chan chan frameBuf, 2*workers), sem: make(chan struct{}, workers),
		done: make(chan error, 1),
	}
	c.buf = append(c.newBuf(), liveMagic...)
	return c, nil
}

func (c *chunkWriter) newBuf() []byte {
	select {
	case b := <-c.free:
		return b[:hdrRoom]
	default:
		return make([]byte, hdrRoom, hdrRoom+chunkSize)
	}
}

func (c *chunkWriter) reuse(b []byte) {
	if cap(b) != hdrRoom+chunkSize {
		return
	}
	select {
	case c.free <- b:
	default:
	}
}

// WriteTo sends the chunks to w in order until Close; after a write error
// it drains the rest. The HTTP client calls it with its connection.
func (c *chunkWriter) WriteTo(w io.Writer) (int64, error) {
	if !c.started.CompareAndSwap(false, true) {
		return 0, errors.New("the live transfer body is sent once")
	}
	err := c.send(w)
	return c.sent.Load(), err
}

// Read serves a client that reads the body instead of calling WriteTo.
func (c *chunkWriter) Read(p []byte) (int, error) {
	if c.started.CompareAndSwap(false, true) {
		pr, pw := io.Pipe()
		c.pr.Store(pr)
		go func() { pw.CloseWithError(c.send(pw)) }()
	}
	pr := c.pr.Load()
	if pr == nil {
		return 0, errors.New("the live transfer body is sent once")
	}
	return pr.Read(p)
}

// CloseBody is the body's Close: the client is done with it. Nothing more
// is written; a sender that never started drains the chunks so that the
// records' writer does not wait for it.
func (c *chunkWriter) CloseBody() error {
	c.abort(errBodyClosed)
	if c.started.CompareAndSwap(false, true) {
		go func() { _ = c.send(io.Discard) }()
	}
	if pr := c.pr.Load(); pr != nil {
		_ = pr.CloseWithError(errBodyClosed)
	}
	return nil
}

// body is the request body of the stream.
func (c *chunkWriter) body() io.ReadCloser { return liveBody{c} }

type liveBody struct{ c *chunkWriter }

func (b liveBody) Read(p []byte) (int, error)         { return b.c.Read(p) }
func (b liveBody) WriteTo(w io.Writer) (int64, error) { return b.c.WriteTo(w) }
func (b liveBody) Close() error                       { return b.c.CloseBody() }

func (c *chunkWriter) send(w io.Writer) error {
	var err error
	for {
		var fut chan frameBuf
		select {
		case fut = <-c.queue:
		default:
			c.waiting.Store(true)
			fut = <-c.queue
			c.waiting.Store(false)
		}
		if fut == nil {
			break
		}
		f := <-fut
		if err == nil {
			err = c.broken()
		}
		if err == nil {
			var n int
			n, err = w.Write(f.b)
			c.sent.Add(int64(n))
			if err != nil {
				c.abort(err)
			}
		}
		c.reuse(f.buf)
	}
	c.done <- err
	return err
}

// room returns the free space of the chunk being filled (flushing it first
// when full), for a caller that reads straight into it; fill commits n
// bytes of it.
func (c *chunkWriter) room() ([]byte, error) {
	if err := c.broken(); err != nil {
		return nil, err
	}
	if len(c.buf) == cap(c.buf) {
		c.flush()
	}
	return c.buf[len(c.buf):cap(c.buf)], nil
}

func (c *chunkWriter) fill(n int) { c.buf = c.buf[:len(c.buf)+n] }

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		r, err := c.room()
		if err != nil {
			return n - len(p), err
		}
		k := copy(r, p)
		c.fill(k)
		p = p[k:]
	}
	return n, nil
}

// flush hands the chunk being filled to the sender, compressed or not.
func (c *chunkWriter) flush() {
	if len(c.buf) == hdrRoom {
		return
	}
	buf := c.buf
	raw := buf[hdrRoom:]
	c.buf = c.newBuf()
	c.chunks.Add(1)
	// auto: compress while the sender is busy and the link holds it back,
	// but never queue a chunk behind another one being compressed (the
	// CPU is full).
	compress := c.mode == "zstd" ||
		(c.mode == "auto" && !c.waiting.Load() && len(c.sem) < cap(c.sem) && (c.linkBound == nil || c.linkBound()))
	fut := make(chan frameBuf, 1)
	c.queue <- fut
	if !compress {
		fut <- frameBuf{b: framed(buf, codecNone, len(raw)), buf: buf}
		return
	}
	c.zchunks.Add(1)
	c.sem <- struct{}{}
	go func() {
		defer func() { <-c.sem }()
		z := c.enc.EncodeAll(raw, c.newBuf())
		if len(z)-hdrRoom >= len(raw) {
			c.reuse(z)
			fut <- frameBuf{b: framed(buf, codecNone, len(raw)), buf: buf}
			return
		}
		c.reuse(buf)
		fut <- frameBuf{b: framed(z, codecZstd, len(raw)), buf: z}
	}()
}

// framed writes the frame header (codec, uvarint raw length, uvarint
// payload length) into the room in front of the payload buf[hdrRoom:] and
// returns the frame.
func framed(buf []byte, codec byte, rawLen int) []byte {
	var h [hdrRoom]byte
	hb := append(h[:0], codec)
	hb = binary.AppendUvarint(hb, uint64(rawLen))
	hb = binary.AppendUvarint(hb, uint64(len(buf)-hdrRoom))
	start := hdrRoom - len(hb)
	copy(buf[start:], hb)
	return buf[start:]
}

// Close sends what is buffered and waits for the sender; it returns the
// first write error.
func (c *chunkWriter) Close() error {
	c.once.Do(func() {
		c.flush()
		close(c.queue)
		c.err = <-c.done
		c.enc.Close()
	})
	return c.err
}

// chunkReader turns a live body back into the record stream.
type chunkReader struct {
	r     *bufio.Reader
	dec   *zstd.Decoder
	cur   []byte
	zbuf  []byte
	out   []byte
	name  []byte // scratch of recReader.str
	magic bool
}

func newChunkReader(r io.Reader) (*chunkReader, error) {
	// One chunk decodes to at most maxChunk bytes, whatever its frames
	// claim: the decoder refuses a larger window or output (summed over
	// the frames of a payload) before it allocates for it.
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(maxChunk), zstd.WithDecoderMaxWindow(maxChunk))
	if err != nil {
		return nil, err
	}
	// A small buffer: a frame's payload larger than it is read straight
	// into place.
	return &chunkReader{r: bufio.NewReaderSize(r, 64<<10), dec: dec}, nil
}

func (c *chunkReader) Close() { c.dec.Close() }

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		if err := c.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// take returns up to n bytes of the stream without copying them: a slice
// of the current chunk, valid until the next call.
func (c *chunkReader) take(n int) ([]byte, error) {
	for len(c.cur) == 0 {
		if err := c.next(); err != nil {
			return nil, err
		}
	}
	b := c.cur[:min(n, len(c.cur))]
	c.cur = c.cur[len(b):]
	return b, nil
}

func (c *chunkReader) ReadByte() (byte, error) {
	for len(c.cur) == 0 {
		if err := c.next(); err != nil {
			return 0, err
		}
	}
	b := c.cur[0]
	c.cur = c.cur[1:]
	return b, nil
}

func (c *chunkReader) next() error {
	codec, err := c.r.ReadByte()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF // the end record says where the stream ends
		}
		return err
	}
	rawLen, err := binary.ReadUvarint(c.r)
	if err != nil {
		return varintErr(err)
	}
	plen, err := binary.ReadUvarint(c.r)
	if err != nil {
		return varintErr(err)
	}
	if rawLen == 0 || rawLen > maxChunk || plen > maxChunk {
		return errBadStream
	}
	switch codec {
	case codecNone:
		if plen != rawLen {
			return errBadStream
		}
		c.out = grow(c.out, int(plen))
		if _, err := io.ReadFull(c.r, c.out); err != nil {
			return unexpectedEOF(err)
		}
	case codecZstd:
		c.zbuf = grow(c.zbuf, int(plen))
		if _, err := io.ReadFull(c.r, c.zbuf); err != nil {
			return unexpectedEOF(err)
		}
		out, err := c.dec.DecodeAll(c.zbuf, c.out[:0])
		if err != nil || uint64(len(out)) != rawLen {
			return errBadStream
		}
		c.out = out
	default:
		return errBadStream
	}
	c.cur = c.out
	if !c.magic {
		if len(c.cur) < len(liveMagic) || string(c.cur[:len(liveMagic)]) != liveMagic {
			return errBadStream
		}
		c.cur = c.cur[len(liveMagic):]
		c.magic = true
	}
	return nil
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// atEnd refuses a stream that goes on after its end record: nothing
// follows it (docs/live-transfers.md).
func (c *chunkReader) atEnd() error {
	if len(c.cur) > 0 {
		return errBadStream
	}
	if _, err := c.r.Peek(1); !errors.Is(err, io.EOF) {
		if err == nil {
			return errBadStream
		}
		return err
	}
	return nil
}

// errVarintOverflow is encoding/binary's (unexported) error for a varint
// longer than 64 bits.
var errVarintOverflow = func() error {
	_, err := binary.ReadUvarint(bytes.NewReader(bytes.Repeat([]byte{0x80}, binary.MaxVarintLen64+1)))
	return err
}()

// varintErr is unexpectedEOF for a varint's read: one that overflows is
// not a valid stream.
func varintErr(err error) error {
	if errors.Is(err, errVarintOverflow) {
		return errBadStream
	}
	return unexpectedEOF(err)
}

// unexpectedEOF: the stream says where it ends (the end record), so an
// end of input anywhere else is a truncation.
func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// recWriter encodes records.
type recWriter struct {
	w       io.Writer
	scratch []byte
}

func (r *recWriter) begin(kind byte)  { r.scratch = append(r.scratch[:0], kind) }
func (r *recWriter) uvarint(v uint64) { r.scratch = binary.AppendUvarint(r.scratch, v) }
func (r *recWriter) varint(v int64)   { r.scratch = binary.AppendVarint(r.scratch, v) }
func (r *recWriter) str(s string) {
	r.uvarint(uint64(len(s)))
	r.scratch = append(r.scratch, s...)
}
func (r *recWriter) bytes(b []byte) { r.scratch = append(r.scratch, b...) }
func (r *recWriter) flush() error {
	_, err := r.w.Write(r.scratch)
	return err
}

// recReader decodes records.
type recReader struct{ r *chunkReader }

func (r recReader) byte() (byte, error) {
	b, err := r.r.ReadByte()
	return b, unexpectedEOF(err)
}

func (r recReader) uvarint() (uint64, error) {
	v, err := binary.ReadUvarint(r.r)
	return v, varintErr(err)
}

func (r recReader) varint() (int64, error) {
	v, err := binary.ReadVarint(r.r)
	return v, varintErr(err)
}

func (r recReader) str() (string, error) {
	n, err := r.uvarint()
	if err != nil {
		return "", err
	}
	if n == 0 || n > maxNameLen {
		return "", errBadStream
	}
	// Read into the reader's scratch buffer: the string is the one
	// allocation of the record.
	r.r.name = grow(r.r.name, int(n))
	if _, err := io.ReadFull(r.r, r.r.name); err != nil {
		return "", unexpectedEOF(err)
	}
	return string(r.r.name), nil
}

func (r recReader) sum() (contentHash, error) {
	var s contentHash
	_, err := io.ReadFull(r.r, s[:])
	return s, unexpectedEOF(err)
}
