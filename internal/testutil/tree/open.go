package tree

import (
	"archive/tar"
	"compress/gzip"
	"io"
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

// Headers lists the entries of the tar.gz read from r by name, those of the
// tree trailer that may follow the end-of-archive marker included (see
// package archive), or fails tb when it is not a valid tar.gz.
func Headers(tb testing.TB, r io.Reader) map[string]*tar.Header {
	tb.Helper()
	gz, err := gzip.NewReader(r)
	if err != nil {
		tb.Fatalf("not a gzip stream: %v", err)
	}
	out := map[string]*tar.Header{}
	for range 2 { // the tar stream, then the trailer
		tr := tar.NewReader(gz)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				tb.Fatalf("not a valid tar.gz: %v", err)
			}
			out[h.Name] = h
		}
	}
	return out
}
