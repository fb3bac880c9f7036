package chunkstore

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Manifests of version 4 on are binary: a manifest of 32,000 files and
// 37,000 chunks is 7.8 MB of JSON (hex hashes, 19-digit times, field
// names) and took ~10 ms to encode and ~8 ms to write and sync, most of a
// small incremental backup's commit; binary, it is about half the size
// and encodes in about a millisecond. The object keeps its name
// (snapshots/<server>/<backup>.json) so that the backups of every version
// are found alike; ParseManifest reads both encodings.
//
//	magic (16 bytes) version (1 byte, 4) sha1 (40 hex digits) flags (1 byte: 1 bare)
//	server, backup (strings) created (varint, Unix ns) size (varint)
//	chunk count (uvarint), each: SHA-256 (32 bytes) length (uvarint)
//	file count (uvarint), each: path (string) size mtime ctime (varints)
//	  inode device mode (uvarints) sha1 (string) first count (uvarints)
//
// A string is its length (uvarint) and its bytes.
var manifestMagic = "\x00wharf-manifest\n"

// manifestSHA1At is where the checksum's 40 hex digits are in an encoded
// manifest.
const manifestSHA1At = len("\x00wharf-manifest\n") + 1

// encodeManifestBin encodes m; ids are its chunks' hashes decoded (nil:
// decoded here from m.Chunks).
func encodeManifestBin(m *Manifest, ids []blobID) ([]byte, error) {
	if len(m.SHA1) != 40 || m.Version < 4 || m.Version > 255 {
		return nil, fmt.Errorf("manifest: version %d, checksum of %d digits", m.Version, len(m.SHA1))
	}
	if len(ids) != len(m.Chunks) {
		ids = make([]blobID, len(m.Chunks))
		for i, c := range m.Chunks {
			h, err := parseHash(c.Hash)
			if err != nil {
				return nil, fmt.Errorf("manifest: chunk %d: %w", i, err)
			}
			ids[i] = h
		}
	}
	n := 128 + len(m.Server) + len(m.Backup) + len(m.Chunks)*(32+3)
	for i := range m.Files {
		f := &m.Files[i]
		if f.First < 0 || f.Count < 0 {
			return nil, fmt.Errorf("manifest: file %s names chunks %d+%d", f.Path, f.First, f.Count)
		}
		n += len(f.Path) + len(f.SHA1) + 48
	}
	b := make([]byte, 0, n)
	b = append(b, manifestMagic...)
	b = append(b, byte(m.Version))
	b = append(b, m.SHA1...)
	flags := byte(0)
	if m.Bare {
		flags |= 1
	}
	b = append(b, flags)
	b = appendString(b, m.Server)
	b = appendString(b, m.Backup)
	b = binary.AppendVarint(b, m.Created.UnixNano())
	b = binary.AppendVarint(b, m.Size)
	b = binary.AppendUvarint(b, uint64(len(m.Chunks)))
	for i, c := range m.Chunks {
		b = append(b, ids[i][:]...)
		b = binary.AppendUvarint(b, uint64(c.Len))
	}
	b = binary.AppendUvarint(b, uint64(len(m.Files)))
	for i := range m.Files {
		f := &m.Files[i]
		b = appendString(b, f.Path)
		b = binary.AppendVarint(b, f.Size)
		b = binary.AppendVarint(b, f.MtimeNs)
		b = binary.AppendVarint(b, f.CtimeNs)
		b = binary.AppendUvarint(b, f.Ino)
		b = binary.AppendUvarint(b, f.Dev)
		b = binary.AppendUvarint(b, uint64(f.Mode))
		b = appendString(b, f.SHA1)
		b = binary.AppendUvarint(b, uint64(f.First))
		b = binary.AppendUvarint(b, uint64(f.Count))
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// isBinaryManifest reports whether b is a binary manifest (else JSON).
func isBinaryManifest(b []byte) bool {
	return len(b) >= len(manifestMagic) && string(b[:len(manifestMagic)]) == manifestMagic
}

var errManifestShort = errors.New("manifest: truncated")

// manifestReader decodes a binary manifest; the first error sticks.
type manifestReader struct {
	b   []byte
	err error
}

func (r *manifestReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

func (r *manifestReader) bytes(n int) []byte {
	if n < 0 || n > len(r.b) {
		r.fail(errManifestShort)
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *manifestReader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }
func (r *manifestReader) varint() int64   { return readVarint(r, binary.Varint) }

// readVarint reads a number with read (binary.Uvarint or binary.Varint).
func readVarint[T uint64 | int64](r *manifestReader, read func([]byte) (T, int)) T {
	v, n := read(r.b)
	if n <= 0 {
		r.fail(errManifestShort)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of records of at least min bytes each: more than
// the rest of the manifest can hold is refused before anything is
// allocated for them.
func (r *manifestReader) count(min int) int {
	v := r.uvarint()
	if v > uint64(len(r.b)/min) {
		r.fail(fmt.Errorf("manifest: %d records in %d bytes", v, len(r.b)))
		return 0
	}
	return int(v)
}

// index reads a non-negative int (a chunk index or count).
func (r *manifestReader) index() int {
	v := r.uvarint()
	if v > 1<<40 {
		r.fail(errors.New("manifest: chunk index out of range"))
		return 0
	}
	return int(v)
}

func (r *manifestReader) byte() byte {
	if b := r.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *manifestReader) string() string { return string(r.bytes(int(min(r.uvarint(), 1<<31)))) }

// decodeManifestBin decodes a binary manifest (its checks are
// ParseManifest's).
func decodeManifestBin(b []byte) (Manifest, error) {
	r := &manifestReader{b: b[len(manifestMagic):]}
	var m Manifest
	m.Version = int(r.byte())
	if r.err == nil && m.Version < 4 {
		return Manifest{}, fmt.Errorf("manifest: binary of version %d", m.Version)
	}
	m.SHA1 = string(r.bytes(40))
	m.Bare = r.byte()&1 != 0
	m.Server, m.Backup = r.string(), r.string()
	m.Created = time.Unix(0, r.varint()).UTC()
	m.Size = r.varint()
	m.Chunks = make([]Chunk, r.count(32+1))
	for i := range m.Chunks {
		m.Chunks[i].Hash = hex.EncodeToString(r.bytes(32))
		m.Chunks[i].Len = int64(min(r.uvarint(), 1<<62))
	}
	if nf := r.count(10); nf > 0 {
		m.Files = make([]File, nf)
	}
	for i := range m.Files {
		f := &m.Files[i]
		f.Path = r.string()
		f.Size, f.MtimeNs, f.CtimeNs = r.varint(), r.varint(), r.varint()
		f.Ino, f.Dev = r.uvarint(), r.uvarint()
		if mode := r.uvarint(); mode > 1<<32-1 {
			r.fail(errors.New("manifest: a file's mode is out of range"))
		} else {
			f.Mode = uint32(mode)
		}
		f.SHA1 = r.string()
		f.First, f.Count = r.index(), r.index()
	}
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("manifest: %d bytes after its end", len(r.b))
	}
	if r.err != nil {
		return Manifest{}, r.err
	}
	return m, nil
}
