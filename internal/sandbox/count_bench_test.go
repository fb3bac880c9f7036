package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchTree is a server root with 10,000 empty files in 100 directories
// (the disk monitor's benchmark node has 100 of them).
func benchTree(b *testing.B) *FS {
	b.Helper()
	root := b.TempDir()
	for d := range 100 {
		dir := filepath.Join(root, fmt.Sprintf("d%03d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), nil, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	fsys, err := New(root, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fsys.Close() })
	return fsys
}

// The disk monitor's entry count (directory records only) next to the
// full walk (a stat per entry) it replaces at every check, on 10,000
// files (dentries cached: the steady state of a node).
func BenchmarkCountEntries10k(b *testing.B) {
	fsys := benchTree(b)
	for b.Loop() {
		if n, err := fsys.CountEntries(context.Background()); err != nil || n != 10100 {
			b.Fatal(n, err)
		}
	}
}

func BenchmarkRefreshUsage10k(b *testing.B) {
	fsys := benchTree(b)
	for b.Loop() {
		if _, err := fsys.RefreshUsage(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
