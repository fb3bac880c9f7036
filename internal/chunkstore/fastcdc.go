package chunkstore

// Content-defined chunking: FastCDC (Xia et al., "FastCDC: a Fast and
// Efficient Content-Defined Chunking Approach for Data Deduplication",
// USENIX ATC 2016), written from the paper's description. A gear hash
// (h = h<<1 + gear[byte]) rolls over the bytes after the minimum size;
// a chunk ends where the hash's masked bits are all zero. Normalized
// chunking: before the average size the mask has two more bits than the
// average's (a cut is 4× less likely), after it two fewer (4× more), so
// chunk sizes gather around the average.
//
// The sizes and the table are fixed for every repository: the boundaries,
// hence the deduplication between backups, depend on them.
const (
	minChunk = 32 << 10
	avgChunk = 128 << 10 // 2^avgBits
	maxChunk = 2 << 20
	avgBits  = 17
)

// The masks test the hash's top bits: bit 63 of the gear hash depends on
// the last 64 bytes, the low bits only on the last few.
const (
	maskSmall = ^(^uint64(0) >> (avgBits + 2))
	maskLarge = ^(^uint64(0) >> (avgBits - 2))
)

// gearShifted is gear shifted left by one: two bytes of the hash are
// h<<2 + gearShifted[b0] + gear[b1], where the two table values add up
// off the chain of dependent steps (a fifth faster than one byte a step).
var gearShifted = func() (t [256]uint64) {
	for i, g := range gear {
		t[i] = g << 1
	}
	return t
}()

// gear is the table of 256 pseudo-random 64-bit values of the hash,
// from splitmix64 with a fixed seed (a table, never written after init).
var gear = gearTable()

func gearTable() (t [256]uint64) {
	x := uint64(0x5772_6866_4344_4331) // fixed seed: "WrhfCDC1"
	for i := range t {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		t[i] = z ^ (z >> 31)
	}
	return t
}

// cutPoint is the length of the first chunk of data: len(data) when no
// boundary is found before its end (or before maxChunk).
func cutPoint(data []byte) int {
	n := len(data)
	if n <= minChunk {
		return n
	}
	n = min(n, maxChunk)
	normal := min(n, avgChunk)
	h, cut := roll(0, data[minChunk:normal], maskSmall)
	if cut >= 0 {
		return minChunk + cut
	}
	if _, cut = roll(h, data[normal:n], maskLarge); cut >= 0 {
		return normal + cut
	}
	return n
}

// roll rolls the gear hash h over data and returns the hash and the
// length of the chunk that ends at the first position where h&mask is
// zero, or -1. Every byte's hash is tested, as one byte a step would.
func roll(h uint64, data []byte, mask uint64) (uint64, int) {
	i := 0
	for ; i+1 < len(data); i += 2 {
		b0, b1 := data[i], data[i+1]
		mid := h<<1 + gear[b0]
		h = h<<2 + (gearShifted[b0] + gear[b1])
		if mid&mask == 0 {
			return mid, i + 1
		}
		if h&mask == 0 {
			return h, i + 2
		}
	}
	if i < len(data) {
		h = h<<1 + gear[data[i]]
		if h&mask == 0 {
			return h, i + 1
		}
	}
	return h, -1
}
