package tree

import (
	"testing"

	"github.com/wharf/wharf/internal/sandbox"
)

// Open opens root as a sandbox for tests and benchmarks: trusted (no
// denylist), no change of owner, closed when tb ends.
func Open(tb testing.TB, root string) *sandbox.FS {
	tb.Helper()
	f, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f.Trusted()
}
