package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/testutil/tree"
)

// benchExtract extracts data into a fresh directory per iteration (its
// removal not timed).
func benchExtract(b *testing.B, data []byte) {
	base := b.TempDir()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst := filepath.Join(base, fmt.Sprint(i))
		fsys := tree.Open(b, dst)
		if _, err := Extract(context.Background(), bytes.NewReader(data), fsys.Trusted(), ExtractOptions{}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		_ = fsys.Close()
		if err := os.RemoveAll(dst); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkExtractDeepTree: a chain of 2,000 directories with a file at
// each level (what a hostile owner restores or transfers to burn CPU).
func BenchmarkExtractDeepTree(b *testing.B) {
	benchExtract(b, deepArchive(b, 2000))
}

// BenchmarkExtractWideTree: 100 directories of 100 small files each (an
// ordinary tree: the stack must not cost it anything).
func BenchmarkExtractWideTree(b *testing.B) {
	var ents []any
	for d := 0; d < 100; d++ {
		dir := fmt.Sprintf("w%03d/", d)
		ents = append(ents, &tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: mtime}, "")
		for f := 0; f < 100; f++ {
			ents = append(ents, &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("%sf%03d", dir, f), ModTime: mtime}, strings.Repeat("x", 100))
		}
	}
	benchExtract(b, tarGz(b, ents...))
}
