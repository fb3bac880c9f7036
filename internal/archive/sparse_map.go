package archive

import (
	"archive/tar"
	"strconv"
	"strings"
)

// Sparse entries for other extractors (issue 38 §1b, decompress writes
// holes): the file manager's decompress reads tar archives with Go's reader
// too, which expands a sparse entry's holes into zeros and does not expose
// its map. SparseMap gives the map, so that the caller can read the
// fragments straight from the stream, seek over the holes, and owe the
// reader the bytes it skipped (as Extract does, extract_sparse.go).

// SparseFragment is one data fragment of a sparse entry: Length bytes of
// the entry's data section belong at Offset of the file.
type SparseFragment struct{ Offset, Length int64 }

// MaxSparseFragments bounds the fragments SparseMap returns for one entry.
const MaxSparseFragments = maxMapBytes / 4

// SparseMap returns the data fragments of the GNU sparse entry hdr that Go's
// tar reader has just returned, in order, and the length of its data
// section (the sum of the fragments' lengths); ok is false when hdr is not a
// sparse entry of the PAX formats 0.0, 0.1 or 1.0. rec is what the reader
// consumed from the stream for the entry's headers (its tail is enough: the
// entry's ustar header and what follows it): format 1.0 keeps its map at
// the start of the data, which the reader reads and does not expose. The
// PAX formats 0.0 and 0.1 keep it in the PAX records. An entry whose map
// does not describe it is an error.
func SparseMap(hdr *tar.Header, rec []byte) (frags []SparseFragment, data int64, ok bool, err error) {
	var fs []frag
	switch {
	case isSparse10(hdr):
		fs, data, err = sparseLayout(&tap{rec: rec}, hdr)
	case hdr.PAXRecords["GNU.sparse.map"] != "":
		fs, data, err = sparseMap0x(hdr.PAXRecords["GNU.sparse.map"], hdr.Size)
	default:
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, true, err
	}
	frags = make([]SparseFragment, len(fs))
	for i, f := range fs {
		frags[i] = SparseFragment{f.off, f.n}
	}
	return frags, data, true, nil
}

// sparseMap0x parses the map of the PAX formats 0.0 and 0.1 ("off,len,off,
// len,..." in decimal; Go's reader joins the 0.0 records into this one):
// fragments in order, not overlapping, within size.
func sparseMap0x(m string, size int64) ([]frag, int64, error) {
	parts := strings.Split(m, ",")
	if len(parts)%2 != 0 || len(parts)/2 > MaxSparseFragments {
		return nil, 0, errSparse
	}
	frags := make([]frag, 0, len(parts)/2)
	var end, data int64
	for i := 0; i < len(parts); i += 2 {
		off, err1 := strconv.ParseInt(parts[i], 10, 64)
		n, err2 := strconv.ParseInt(parts[i+1], 10, 64)
		if err1 != nil || err2 != nil || off < end || n < 0 || off > size || n > size-off {
			return nil, 0, errSparse
		}
		frags = append(frags, frag{off, n})
		end, data = off+n, data+n
	}
	return frags, data, nil
}
