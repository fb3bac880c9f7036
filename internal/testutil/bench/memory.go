package bench

import (
	"syscall"
	"testing"
)

// WarmMemory touches n bytes of fresh memory and gives them back to the
// kernel, so that the runs that follow allocate pages the host already
// backs. On a VM whose memory the host backs lazily (this project's CI
// machines), the first touch of a page costs several times its use: a
// tmpfs write of a 4th GiB measured 3.8 s against 0.55 s for the first,
// which made whichever run of a pair came second look slow.
func WarmMemory(tb testing.TB, n int) {
	tb.Helper()
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_POPULATE)
	if err != nil {
		tb.Logf("warming %d bytes of memory: %v", n, err)
		return
	}
	if err := syscall.Munmap(m); err != nil {
		tb.Fatal(err)
	}
}
