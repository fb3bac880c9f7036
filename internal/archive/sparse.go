package archive

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Sparse files (issue 33, item 5). A file whose allocated blocks are fewer
// than its size may have holes; Write asks the kernel where its data lies
// (SEEK_DATA/SEEK_HOLE on the open descriptor), reads only that, and stores
// the file as a GNU sparse entry of format 1.0, which GNU tar and Go's
// archive/tar reader understand:
//
//	PAX header: GNU.sparse.major=1, GNU.sparse.minor=0,
//	            GNU.sparse.name=<name>, GNU.sparse.realsize=<size>
//	ustar header: name GNUSparseFile.0/<base>, size = map + data
//	data: the sparse map ("<count>\n" then "<offset>\n<length>\n" per
//	      fragment, in decimal, zero-padded to a 512-byte block), then the
//	      fragments' bytes one after the other.
//
// Go's writer cannot write such an entry (it refuses GNU.sparse records),
// so sparseHeader encodes the two headers itself.

// frag is one data fragment of a sparse file.
type frag struct{ off, n int64 }

// maxFrags bounds the fragments of one sparse entry, so that its map stays
// under the 1 MiB Go's reader (hence Wings) accepts: at most 2×20 digits
// and 2 newlines per fragment.
const maxFrags = 16384

// maxMapBytes bounds a sparse map Extract parses (Go's reader's own limit).
const maxMapBytes = 1 << 20

// errSparse marks a sparse map or header that does not describe its entry.
var errSparse = errors.New("invalid sparse entry")

// Extent is one data range of a file: N bytes at offset Off.
type Extent struct{ Off, N int64 }

// DataExtents lists the data of the open file fd up to size (its size when
// opened) with SEEK_DATA/SEEK_HOLE. Past limit extents, the smallest holes
// are merged into the data around them (read as zeros). ok is false when
// the filesystem cannot tell (the file is then read whole). Archives and
// live transfers both read a sparse file's data through it.
func DataExtents(fd int, size int64, limit int) (exts []Extent, ok bool) {
	var off int64
	for off < size {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, syscall.ENXIO) {
			break // only a hole up to the end
		}
		if err != nil || start < off {
			return nil, false
		}
		if start >= size {
			break
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil || end <= start {
			return nil, false
		}
		end = min(end, size)
		exts = append(exts, Extent{start, end - start})
		if len(exts) > 2*limit {
			exts = mergeExtents(exts, limit)
		}
		off = end
	}
	return mergeExtents(exts, limit), true
}

// mergeExtents merges the extents separated by the smallest holes until at
// most limit are left.
func mergeExtents(exts []Extent, limit int) []Extent {
	for gap := int64(4096); len(exts) > limit; gap *= 2 {
		out := exts[:1]
		for _, e := range exts[1:] {
			last := &out[len(out)-1]
			if e.Off-(last.Off+last.N) <= gap {
				last.N = e.Off + e.N - last.Off
				continue
			}
			out = append(out, e)
		}
		exts = out
	}
	return exts
}

// dataFrags is DataExtents bounded by maxFrags, as an archive's fragments.
func dataFrags(fd int, size int64) ([]frag, bool) {
	exts, ok := DataExtents(fd, size, maxFrags)
	if !ok {
		return nil, false
	}
	frags := make([]frag, len(exts))
	for i, e := range exts {
		frags[i] = frag{e.Off, e.N}
	}
	return frags, true
}

// dataBytes is the sum of the fragments' lengths.
func dataBytes(frags []frag) int64 {
	var n int64
	for _, f := range frags {
		n += f.n
	}
	return n
}

// withEnd returns frags ending with a fragment that reaches size: a file
// that ends in a hole gets an empty fragment at its end, as GNU tar writes.
func withEnd(frags []frag, size int64) []frag {
	if len(frags) == 0 || frags[len(frags)-1].off+frags[len(frags)-1].n < size {
		frags = append(frags, frag{size, 0})
	}
	return frags
}

// formatMap is the sparse map's text, unpadded.
func formatMap(frags []frag) []byte {
	b := strconv.AppendInt(nil, int64(len(frags)), 10)
	b = append(b, '\n')
	for _, f := range frags {
		b = strconv.AppendInt(b, f.off, 10)
		b = append(b, '\n')
		b = strconv.AppendInt(b, f.n, 10)
		b = append(b, '\n')
	}
	return b
}

// parseMap reads a sparse map of format 1.0 from blocks, which hold whole
// 512-byte blocks, as Go's reader does: a count, then an offset and a
// length per fragment, each a decimal number ending with a newline. It
// returns the fragments and how many blocks the map takes. The fragments
// must be in order, not overlap and end within realsize.
func parseMap(blocks []byte, realsize int64) ([]frag, int, error) {
	if len(blocks) > maxMapBytes {
		blocks = blocks[:maxMapBytes]
	}
	rest := blocks
	next := func() (int64, bool) {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return 0, false
		}
		v, err := strconv.ParseInt(string(rest[:i]), 10, 64)
		rest = rest[i+1:]
		return v, err == nil
	}
	count, ok := next()
	if !ok || count < 0 || count > maxMapBytes/4 {
		return nil, 0, errSparse
	}
	frags := make([]frag, 0, min(count, 1024))
	var end int64
	for i := int64(0); i < count; i++ {
		off, ok1 := next()
		n, ok2 := next()
		if !ok1 || !ok2 || off < end || n < 0 || off > realsize || n > realsize-off {
			return nil, 0, errSparse
		}
		frags = append(frags, frag{off, n})
		end = off + n
	}
	used := len(blocks) - len(rest)
	return frags, (used + 511) / 512, nil
}

// sparseHeader encodes the PAX header and the ustar header of a sparse
// entry named name (as it would be stored), of size realsize, mode mode and
// modification time mtime (Unix seconds), whose data section (map and
// fragments) is physical bytes.
func sparseHeader(name string, mode, mtime, realsize, physical int64) []byte {
	base := name
	if i := bytes.LastIndexByte([]byte(name), '/'); i >= 0 {
		base = name[i+1:]
	}
	short := "GNUSparseFile.0/" + base
	if len(short) > 99 {
		short = short[:99]
	}
	recs := paxRecord(nil, "GNU.sparse.major", "1")
	recs = paxRecord(recs, "GNU.sparse.minor", "0")
	recs = paxRecord(recs, "GNU.sparse.name", name)
	recs = paxRecord(recs, "GNU.sparse.realsize", strconv.FormatInt(realsize, 10))
	size := physical
	if physical > maxOctal11 {
		recs = paxRecord(recs, "size", strconv.FormatInt(physical, 10))
		size = 0
	}
	out := ustarBlock("PaxHeaders.0/"+shortBase(base), 0o644, mtime, int64(len(recs)), 'x')
	out = append(out, recs...)
	out = append(out, make([]byte, -len(recs)&511)...)
	return append(out, ustarBlock(short, mode, mtime, size, '0')...)
}

// maxOctal11 is the largest number an 11-digit octal field holds.
const maxOctal11 = 1<<33 - 1

func shortBase(base string) string {
	if len(base) > 80 {
		return base[:80]
	}
	return base
}

// paxRecord appends the PAX record "<len> key=value\n", whose length
// counts itself.
func paxRecord(b []byte, key, value string) []byte {
	n := len(key) + len(value) + 3 // space, '=', newline
	digits := len(strconv.Itoa(n))
	for len(strconv.Itoa(n+digits)) > digits {
		digits++
	}
	return fmt.Appendf(b, "%d %s=%s\n", n+digits, key, value)
}

// ustarBlock is one ustar header block (owner 0, no names of owners).
func ustarBlock(name string, mode, mtime, size int64, typ byte) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	octal(b[100:108], mode&0o7777)
	octal(b[108:116], 0)
	octal(b[116:124], 0)
	octal(b[124:136], size)
	octal(b[136:148], max(mtime, 0))
	b[156] = typ
	copy(b[257:263], "ustar\x00")
	copy(b[263:265], "00")
	copy(b[148:156], "        ")
	var sum int64
	for _, c := range b {
		sum += int64(c)
	}
	octal(b[148:155], sum)
	b[155] = ' '
	return b
}

// octal writes v as zero-padded octal digits ending with a NUL; a value
// too large for the field is left 0 (callers put it in a PAX record).
func octal(field []byte, v int64) {
	s := strconv.FormatInt(v, 8)
	w := len(field) - 1
	if len(s) > w {
		s = "0"
	}
	for i := range w - len(s) {
		field[i] = '0'
	}
	copy(field[w-len(s):w], s)
	field[w] = 0
}

// isUstarHeader reports whether block is a header block with the ustar
// magic (POSIX or GNU) and a valid checksum.
func isUstarHeader(block []byte) bool {
	if len(block) != 512 || !bytes.HasPrefix(block[257:], []byte("ustar")) {
		return false
	}
	want, ok := parseOctal(block[148:156])
	if !ok {
		return false
	}
	var sum int64
	for i, c := range block {
		if i >= 148 && i < 156 {
			c = ' '
		}
		sum += int64(c)
	}
	return sum == want
}

// parseOctal reads a NUL- or space-terminated octal field.
func parseOctal(field []byte) (int64, bool) {
	s := bytes.Trim(field, " \x00")
	if len(s) == 0 {
		return 0, true
	}
	v, err := strconv.ParseInt(string(s), 8, 64)
	return v, err == nil && v >= 0
}

// parseSize reads a header's size field: octal, or GNU base-256 (a first
// byte with its high bit set, positive numbers only).
func parseSize(field []byte) (int64, bool) {
	if len(field) > 0 && field[0]&0x80 != 0 {
		if field[0] != 0x80 {
			return 0, false
		}
		var v int64
		for _, c := range field[1:] {
			if v > (1<<55)-1 {
				return 0, false
			}
			v = v<<8 | int64(c)
		}
		return v, true
	}
	return parseOctal(field)
}

// sparseTail finds a sparse entry's map at the end of rec, the bytes the
// tar reader consumed for the entry's headers: the map's blocks follow the
// entry's ustar header, which is the last block with the ustar magic (a
// map holds only digits, signs and newlines but for the tail of its last
// block, which is never read as a header here). It returns the fragments
// the map's length in blocks and the header's size field (the physical
// size, unless a PAX record overrides it).
func sparseTail(rec []byte, realsize int64) (frags []frag, mapBlocks int, sizeField int64, err error) {
	nblocks := len(rec) / 512
	rec = rec[len(rec)-nblocks*512:]
	for k := 1; k < nblocks; k++ {
		hdr := rec[len(rec)-(k+1)*512 : len(rec)-k*512]
		if !isUstarHeader(hdr) {
			continue
		}
		frags, used, err := parseMap(rec[len(rec)-k*512:], realsize)
		if err != nil || used != k {
			return nil, 0, 0, errSparse
		}
		size, ok := parseSize(hdr[124:136])
		if !ok {
			return nil, 0, 0, errSparse
		}
		return frags, k, size, nil
	}
	return nil, 0, 0, errSparse
}
