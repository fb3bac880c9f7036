package chunkstore

import (
	"math/bits"
	"sync"
)

// bufPool recycles the chunk and blob buffers of a store's backups by
// power-of-two size class (4 KiB to 4 MiB): without it, a backup of a
// GiB allocates, zeroes and collects two GiB of buffers.
type bufPool struct {
	classes [11]sync.Pool
}

const minBufBits = 12

func bufClass(n int) int {
	c := bits.Len(uint(max(n, 1)-1)) - minBufBits
	return max(c, 0)
}

func (p *bufPool) get(n int) []byte {
	c := bufClass(n)
	if c >= len(p.classes) {
		return make([]byte, n)
	}
	if v, ok := p.classes[c].Get().(*[]byte); ok {
		return (*v)[:n]
	}
	return make([]byte, n, 1<<(c+minBufBits))
}

func (p *bufPool) put(b []byte) {
	c := bufClass(cap(b))
	if c < len(p.classes) && cap(b) == 1<<(c+minBufBits) {
		b = b[:0]
		p.classes[c].Put(&b)
	}
}
