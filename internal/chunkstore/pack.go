package chunkstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// A pack is blobs appended one after the other, then the pack's own index
// (one entry per blob) and a fixed-size trailer:
//
//	blob 0 | blob 1 | ... | entry 0 | entry 1 | ... | trailer
//	entry:   SHA-256 of the plain chunk (32) | offset (4) | length (4) | plain length (4)
//	trailer: entry count (4) | SHA-256 of the entries (32) | "WHPACK01"
//
// (integers big-endian). The trailer lets the repository index be rebuilt
// from the packs alone when an index object is lost or damaged.

type blobID = [32]byte

type packEntry struct {
	Hash  blobID
	Off   uint32
	Len   uint32 // stored length (kind byte included)
	Plain uint32
}

const (
	packMagic      = "WHPACK01"
	packEntryLen   = 32 + 4 + 4 + 4
	packTrailerLen = 4 + 32 + len(packMagic)
	// packTarget is the size at which a pack is closed: large enough that
	// a restore reads few objects, small enough that a repack is cheap.
	packTarget = 16 << 20
	// maxPackSize bounds what a trailer may claim (a pack is at most a
	// target plus one largest blob, and its entries).
	maxPackSize = 64 << 20
)

func packName(id string) string { return "packs/" + id[:2] + "/" + id }

// packID is the id in a pack's object name, or "" when name is no pack.
func packID(name string) string {
	id, ok := strings.CutPrefix(name, "packs/")
	if !ok || len(id) != 3+32 || id[2] != '/' || id[:2] != id[3:5] {
		return ""
	}
	if _, err := hex.DecodeString(id[3:]); err != nil {
		return ""
	}
	return id[3:]
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func putEntry(b []byte, e packEntry) []byte {
	b = append(b, e.Hash[:]...)
	b = binary.BigEndian.AppendUint32(b, e.Off)
	b = binary.BigEndian.AppendUint32(b, e.Len)
	return binary.BigEndian.AppendUint32(b, e.Plain)
}

func getEntry(b []byte) packEntry {
	var e packEntry
	copy(e.Hash[:], b)
	e.Off = binary.BigEndian.Uint32(b[32:])
	e.Len = binary.BigEndian.Uint32(b[36:])
	e.Plain = binary.BigEndian.Uint32(b[40:])
	return e
}

// packBufCap is a pack buffer's capacity: a full pack's blobs and,
// unless they are many tiny ones, its entries and trailer.
const packBufCap = packTarget + 1 + maxChunk + 512<<10

// packer builds one pack in memory.
type packer struct {
	buf     []byte
	entries []packEntry
	// free, when set, holds the buffers of stored packs to fill again:
	// a fresh buffer per pack costs its page faults and garbage.
	free chan []byte
}

func (p *packer) start() {
	if p.buf != nil {
		return
	}
	select {
	case b := <-p.free:
		p.buf = b[:0]
	default:
		p.buf = make([]byte, 0, packStartCap)
	}
}

// packStartCap is a new pack buffer's capacity: it doubles as the pack
// fills (reserve), up to packBufCap. A backup of a few small or very
// compressible chunks (the headers of 200,000 empty files are 2.6 MB of
// blobs) then holds no 19 MiB buffer, which also took the Go heap's goal
// up by twice that (issue 33 item 4); the buffers of stored packs are
// filled again at the size they grew to, so a large backup copies only
// its first packs as they grow.
const packStartCap = 1 << 20

// reserve makes room in the buffer for n more bytes.
func (p *packer) reserve(n int) {
	need := len(p.buf) + n
	if need <= cap(p.buf) {
		return
	}
	c := max(2*cap(p.buf), need)
	if c > packBufCap && need <= packBufCap {
		c = packBufCap
	}
	b := make([]byte, len(p.buf), c)
	copy(b, p.buf)
	p.buf = b
}

func (p *packer) add(h blobID, blob []byte, plain int) packEntry {
	p.start()
	p.reserve(len(blob))
	e := packEntry{Hash: h, Off: uint32(len(p.buf)), Len: uint32(len(blob)), Plain: uint32(plain)}
	p.buf = append(p.buf, blob...)
	p.entries = append(p.entries, e)
	return e
}

// addRaw adds plain as a raw blob (its kind byte, then its bytes).
func (p *packer) addRaw(h blobID, plain []byte) packEntry {
	p.start()
	p.reserve(1 + len(plain))
	e := packEntry{Hash: h, Off: uint32(len(p.buf)), Len: uint32(1 + len(plain)), Plain: uint32(len(plain))}
	p.buf = append(append(p.buf, blobRaw), plain...)
	p.entries = append(p.entries, e)
	return e
}

func (p *packer) full() bool  { return len(p.buf) >= packTarget }
func (p *packer) empty() bool { return len(p.entries) == 0 }

// finish appends the entries and the trailer and returns the pack's bytes
// and entries; the packer is empty again.
func (p *packer) finish() ([]byte, []packEntry) {
	b := p.buf
	start := len(b)
	for _, e := range p.entries {
		b = putEntry(b, e)
	}
	sum := sha256.Sum256(b[start:])
	b = binary.BigEndian.AppendUint32(b, uint32(len(p.entries)))
	b = append(b, sum[:]...)
	b = append(b, packMagic...)
	es := p.entries
	p.buf, p.entries = nil, nil
	return b, es
}

// parsePackTrailer checks the trailer of a pack of size bytes and returns
// its entry count and where its entries start.
func parsePackTrailer(t []byte, size int64) (count int, start int64, sum blobID, err error) {
	if len(t) != packTrailerLen || string(t[4+32:]) != packMagic {
		return 0, 0, sum, errors.New("no pack trailer")
	}
	count = int(binary.BigEndian.Uint32(t))
	copy(sum[:], t[4:])
	if size > maxPackSize || int64(count) > (size-int64(packTrailerLen))/packEntryLen {
		return 0, 0, sum, fmt.Errorf("pack trailer claims %d entries in %d bytes", count, size)
	}
	return count, size - int64(packTrailerLen) - int64(count)*packEntryLen, sum, nil
}

// parsePackEntries checks the entries of a pack (their hash, and that
// every blob lies before them) and returns them.
func parsePackEntries(b []byte, count int, start int64, sum blobID) ([]packEntry, error) {
	if len(b) != count*packEntryLen || sha256.Sum256(b) != sum {
		return nil, errors.New("the pack's index does not match its trailer")
	}
	out := make([]packEntry, count)
	for i := range out {
		e := getEntry(b[i*packEntryLen:])
		if e.Len == 0 || int64(e.Off)+int64(e.Len) > start || e.Plain > maxChunk {
			return nil, fmt.Errorf("pack entry %d out of bounds", i)
		}
		out[i] = e
	}
	return out, nil
}

// readPackIndex reads the entries of the pack name of size bytes from its
// trailer (two ranged reads, not the pack).
func readPackIndex(ctx context.Context, b Backend, name string, size int64) ([]packEntry, error) {
	if size < int64(packTrailerLen) {
		return nil, fmt.Errorf("pack %s: too short", name)
	}
	t, err := b.Get(ctx, name, size-int64(packTrailerLen), int64(packTrailerLen))
	if err != nil {
		return nil, err
	}
	count, start, sum, err := parsePackTrailer(t, size)
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", name, err)
	}
	es, err := b.Get(ctx, name, start, int64(count)*packEntryLen)
	if err != nil {
		return nil, err
	}
	out, err := parsePackEntries(es, count, start, sum)
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", name, err)
	}
	return out, nil
}
