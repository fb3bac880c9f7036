package chunkstore

import (
	"errors"
	"fmt"

	"github.com/klauspost/compress/s2"
)

// A blob is a chunk as stored in a pack: one kind byte, then the bytes.
// Data that does not compress (game worlds are often compressed already)
// is stored raw, so reading it costs a copy and no decoder.
const (
	blobRaw byte = 0
	blobS2  byte = 1
)

// encodeBlob returns the blob of plain.
func encodeBlob(plain []byte) []byte {
	return encodeBlobTo(make([]byte, blobBound(len(plain))), plain)
}

// blobBound is the largest blob of n plain bytes.
func blobBound(n int) int { return 1 + s2.MaxEncodedLen(n) }

// probeLen is the size of each of the three samples that decide whether
// a large chunk is worth compressing.
const probeLen = 4 << 10

// incompressible says whether samples of plain's start, middle and end
// save less than 1/32 under S2: then the whole chunk would (jars, packed
// worlds), and encoding it would cost as much as hashing it, for nothing.
func incompressible(plain []byte) bool {
	if len(plain) < 16*probeLen {
		return false
	}
	var z [2 * probeLen]byte // more than s2.MaxEncodedLen(probeLen)
	in, out := 0, 0
	for _, at := range []int{0, len(plain)/2 - probeLen/2, len(plain) - probeLen} {
		in += probeLen
		out += len(s2.Encode(z[:], plain[at:at+probeLen]))
	}
	return out >= in-in/32
}

// encodeBlobTo encodes plain into out (blobBound long).
func encodeBlobTo(out, plain []byte) []byte {
	if incompressible(plain) {
		out[0] = blobRaw
		return append(out[:1], plain...)
	}
	z := s2.Encode(out[1:], plain)
	// Keep the compressed form only when it saves at least 1/32.
	if len(z) < len(plain)-len(plain)/32 {
		out[0] = blobS2
		return out[:1+len(z)]
	}
	out[0] = blobRaw
	return append(out[:1], plain...)
}

// decodeBlob returns the plain bytes of blob b, which must be plainLen
// long (a damaged blob cannot make it allocate more).
func decodeBlob(b []byte, plainLen int) ([]byte, error) {
	if len(b) == 0 {
		return nil, errors.New("empty blob")
	}
	switch b[0] {
	case blobRaw:
		if len(b)-1 != plainLen {
			return nil, fmt.Errorf("raw blob of %d bytes, want %d", len(b)-1, plainLen)
		}
		return b[1:], nil
	case blobS2:
		n, err := s2.DecodedLen(b[1:])
		if err != nil {
			return nil, err
		}
		if n != plainLen {
			return nil, fmt.Errorf("compressed blob of %d bytes, want %d", n, plainLen)
		}
		return s2.Decode(make([]byte, n), b[1:])
	default:
		return nil, fmt.Errorf("unknown blob kind %d", b[0])
	}
}
