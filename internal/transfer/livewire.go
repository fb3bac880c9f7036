package transfer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
)

// The wire of live transfers, version 1 (docs/live-transfers.md is the
// contract; change both together, and bump LiveVersion on any change a
// version-1 peer would misread).

// LiveVersion is the version of the live-transfer wire this build speaks.
const LiveVersion = 1

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
}

// LiveOffer is what this build answers.
func LiveOffer() Offer {
	return Offer{Protocol: LiveProtocol, Versions: []int{LiveVersion}, Compression: []string{"zstd", "none"}}
}

// liveMagic opens the body.
const liveMagic = "WHARF-LIVE-1\n"

// Chunk codecs.
const (
	codecNone = 'N'
	codecZstd = 'Z'
)

// Record kinds.
const (
	recPass     = 'P' // uvarint pass, byte phase
	recDir      = 'D' // path, mode, mtime
	recFile     = 'F' // path, mode, mtime, size, bytes, sha256
	recLink     = 'L' // path, target, mtime
	recDelete   = 'X' // path
	recManifest = 'M' // kind, path, mode, mtime, size, [sha256], [target]
	recEnd      = 'E' // uvarint number of manifest records
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
)

// chunkSize is the raw size of the chunks a source cuts.
const chunkSize = 1 << 20

// errBadStream marks a live body that does not follow the wire.
var errBadStream = fmt.Errorf("%w: not a valid live transfer stream", ErrBadArchive)

// chunkWriter cuts the record stream into chunks and sends each one raw or
// zstd-compressed. Chunks are compressed in parallel and sent in order.
// In auto mode each chunk is compressed only while the link is the
// bottleneck: when the sender is busy writing the previous chunks (the link
// is full, spare CPU shrinks what it has to carry) and raw when the sender
// waits for chunks (the CPU is the bottleneck, so compressing would leave
// the link idle).
type chunkWriter struct {
	mode string // auto, zstd or none
	enc  *zstd.Encoder
	buf  []byte

	queue   chan chan []byte
	sem     chan struct{}
	waiting atomic.Bool // the sender waits for a chunk
	done    chan error
	sent    atomic.Int64 // wire bytes written
	raw     atomic.Int64 // record bytes cut into chunks
	zchunks atomic.Int64
	chunks  atomic.Int64
	once    sync.Once
	err     error
	failed  atomic.Pointer[error] // the sender's write error, seen by Write
}

// broken returns the error that stopped the sender, if any: the target
// answered or the connection broke, so nothing more can reach it.
func (c *chunkWriter) broken() error {
	if p := c.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func newChunkWriter(w io.Writer, mode string) (*chunkWriter, error) {
	workers := max(1, runtime.GOMAXPROCS(0))
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(workers))
	if err != nil {
		return nil, err
	}
	c := &chunkWriter{
		mode: mode, enc: enc, buf: make([]byte, 0, chunkSize),
		queue: make(chan chan []byte, 2*workers), sem: make(chan struct{}, workers),
		done: make(chan error, 1),
	}
	go c.send(w)
	c.buf = append(c.buf, liveMagic...)
	return c, nil
}

// send writes the chunks in order; after a write error it drains the rest.
func (c *chunkWriter) send(w io.Writer) {
	var err error
	for {
		var fut chan []byte
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
		b := <-fut
		if err == nil {
			_, err = w.Write(b)
			c.sent.Add(int64(len(b)))
			if err != nil {
				c.failed.Store(&err)
			}
		}
	}
	c.done <- err
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	if err := c.broken(); err != nil {
		return 0, err
	}
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), chunkSize-len(c.buf))
		c.buf = append(c.buf, p[:k]...)
		p = p[k:]
		if len(c.buf) == chunkSize {
			c.flush()
		}
	}
	return n, nil
}

// flush hands the buffered records to a compressor.
func (c *chunkWriter) flush() {
	if len(c.buf) == 0 {
		return
	}
	raw := c.buf
	c.buf = make([]byte, 0, chunkSize)
	c.raw.Add(int64(len(raw)))
	c.chunks.Add(1)
	// auto: compress while the sender is busy (the link is full), but never
	// queue a chunk behind another one being compressed (the CPU is full).
	compress := c.mode == "zstd" || (c.mode == "auto" && !c.waiting.Load() && len(c.sem) < cap(c.sem))
	fut := make(chan []byte, 1)
	c.queue <- fut
	if !compress {
		fut <- frame(codecNone, len(raw), raw)
		return
	}
	c.zchunks.Add(1)
	c.sem <- struct{}{}
	go func() {
		defer func() { <-c.sem }()
		z := c.enc.EncodeAll(raw, make([]byte, 0, len(raw)/2))
		if len(z) >= len(raw) {
			fut <- frame(codecNone, len(raw), raw)
			return
		}
		fut <- frame(codecZstd, len(raw), z)
	}()
}

// frame is a chunk on the wire: codec, uvarint raw length, uvarint
// payload length, payload.
func frame(codec byte, rawLen int, payload []byte) []byte {
	out := make([]byte, 0, len(payload)+1+2*binary.MaxVarintLen64)
	out = append(out, codec)
	out = binary.AppendUvarint(out, uint64(rawLen))
	out = binary.AppendUvarint(out, uint64(len(payload)))
	return append(out, payload...)
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
	magic bool
}

func newChunkReader(r io.Reader) (*chunkReader, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxChunk))
	if err != nil {
		return nil, err
	}
	return &chunkReader{r: bufio.NewReaderSize(r, 1<<20), dec: dec}, nil
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
		return unexpectedEOF(err)
	}
	plen, err := binary.ReadUvarint(c.r)
	if err != nil {
		return unexpectedEOF(err)
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
	return v, unexpectedEOF(err)
}

func (r recReader) varint() (int64, error) {
	v, err := binary.ReadVarint(r.r)
	return v, unexpectedEOF(err)
}

func (r recReader) str() (string, error) {
	n, err := r.uvarint()
	if err != nil {
		return "", err
	}
	if n == 0 || n > maxNameLen {
		return "", errBadStream
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.r, b); err != nil {
		return "", unexpectedEOF(err)
	}
	return string(b), nil
}

func (r recReader) sum() ([32]byte, error) {
	var s [32]byte
	_, err := io.ReadFull(r.r, s[:])
	return s, unexpectedEOF(err)
}
