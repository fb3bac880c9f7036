package files

import (
	"archive/zip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/wharf/wharf/internal/sandbox"
)

// A zip of many files in nested directories is extracted by parallel
// workers (run with -race), whole; a bomb is rolled back completely.
func TestDecompressZipParallel(t *testing.T) {
	root := t.TempDir()
	f, err := os.Create(filepath.Join(root, "many.zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for i := range 300 {
		w, _ := zw.Create(fmt.Sprintf("d%d/e%d/f%03d.txt", i%7, i%3, i))
		fmt.Fprintf(w, "file %d", i)
	}
	_ = zw.Close()
	_ = f.Close()
	fsys, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1, Denylist: []string{"d6/"}})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	res, err := New(fsys).Decompress(context.Background(), "/", "many.zip")
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 258 || res.Skipped != 42 {
		t.Fatalf("result %+v", res)
	}
	b, err := os.ReadFile(filepath.Join(root, "d1/e2/f050.txt"))
	if err != nil || string(b) != "file 50" {
		t.Fatalf("%q %v", b, err)
	}

	// The same archive against a limit it crosses: nothing of it is left.
	root2 := t.TempDir()
	if err := os.Link(filepath.Join(root, "many.zip"), filepath.Join(root2, "many.zip")); err != nil {
		t.Fatal(err)
	}
	small, err := sandbox.New(root2, sandbox.Options{UID: -1, GID: -1, DiskLimit: 1500})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if _, err := New(small).Decompress(context.Background(), "/", "many.zip"); err != ErrNoSpace {
		t.Fatalf("bomb: %v", err)
	}
	entries, _ := os.ReadDir(root2)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
}
