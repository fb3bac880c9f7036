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
	var h uint64
	i := minChunk
	for ; i < normal; i++ {
		h = h<<1 + gear[data[i]]
		if h&maskSmall == 0 {
			return i + 1
		}
	}
	for ; i < n; i++ {
		h = h<<1 + gear[data[i]]
		if h&maskLarge == 0 {
			return i + 1
		}
	}
	return n
}
