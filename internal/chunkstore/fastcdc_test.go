package chunkstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// oneByteAStep is FastCDC as the paper writes it, one byte a step: the
// reference that cutPoint's two-byte steps must match exactly (the cut
// points decide what deduplicates against the backups already stored).
func oneByteAStep(data []byte) int {
	n := len(data)
	if n <= minChunk {
		return n
	}
	n = min(n, maxChunk)
	var h uint64
	for i := minChunk; i < n; i++ {
		h = h<<1 + gear[data[i]]
		mask := maskLarge
		if i < avgChunk {
			mask = maskSmall
		}
		if h&mask == 0 {
			return i + 1
		}
	}
	return n
}

func pseudoRandom(seed uint64, n int, zeros int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		if zeros == 0 || rng.IntN(zeros) == 0 {
			b[i] = byte(rng.Uint32())
		}
	}
	return b
}

func TestCutPointMatchesOneByteAStep(t *testing.T) {
	for seed := range uint64(40) {
		// Dense and sparse bytes; lengths around every size threshold.
		data := pseudoRandom(seed, 3<<20+int(seed), int(seed%4)*3)
		for off := 0; off < len(data); {
			want := oneByteAStep(data[off:])
			if got := cutPoint(data[off:]); got != want {
				t.Fatalf("seed %d offset %d: cut at %d, want %d", seed, off, got, want)
			}
			off += want
		}
		for _, n := range []int{0, 1, minChunk, minChunk + 1, minChunk + 2, avgChunk - 1, avgChunk, avgChunk + 1, maxChunk - 1, maxChunk, maxChunk + 1} {
			if got, want := cutPoint(data[:n]), oneByteAStep(data[:n]); got != want {
				t.Fatalf("seed %d length %d: cut at %d, want %d", seed, n, got, want)
			}
		}
	}
}

// TestCutPointBoundariesAreStable pins the cut points of a fixed stream:
// a change to the chunker's sizes, table or masks would make every file
// of every server new to the repository at the next backup.
func TestCutPointBoundariesAreStable(t *testing.T) {
	data := pseudoRandom(7, 16<<20, 0)
	h := sha256.New()
	count := 0
	for len(data) > 0 {
		n := cutPoint(data)
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(n)))
		data = data[n:]
		count++
	}
	const want = "0c8277b11485857788a2d456942574c3932a7b90f428a5b313cac6e3afc14224"
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Fatalf("%d chunks, cut points hash %s, want %s", count, got, want)
	}
}

func FuzzCutPoint(f *testing.F) {
	f.Add(pseudoRandom(1, minChunk+100, 0))
	f.Add(pseudoRandom(2, avgChunk+3, 2))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Short inputs reach the masks when stretched: repeat them.
		for len(data) > 0 && len(data) < minChunk+64 {
			data = append(data, data...)
		}
		if got, want := cutPoint(data), oneByteAStep(data); got != want {
			t.Fatalf("cut at %d, want %d", got, want)
		}
	})
}
