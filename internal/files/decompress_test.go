package files

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io/fs"
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

// A tar extraction goes through its directory stack, which never enters a
// symbolic link: an in-root link to a directory in the archive's way is
// still followed (through the root, as before the stack), a link leading
// out is still refused, and the denylist still holds below a directory the
// stack made.
func TestDecompressTarThroughInRootLinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	for _, d := range []string{"real", "base"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("real", filepath.Join(root, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "base", "out")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	add := func(name string, dir bool) {
		h := &tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(name))}
		if dir {
			h.Mode, h.Typeflag, h.Size = 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if !dir {
			_, _ = tw.Write([]byte(name))
		}
	}
	add("sub/", true)
	add("sub/new/", true)
	add("sub/new/f", false)
	add("sub/g", false)
	add("deep/", true)
	add("deep/er/", true)
	add("deep/er/x.secret", false)
	add("deep/er/y", false)
	_ = tw.Close()
	_ = gz.Close()
	if err := os.WriteFile(filepath.Join(root, "a.tar.gz"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	fsys, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1, Denylist: []string{"*.secret"}})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	res, err := New(fsys).Decompress(context.Background(), "/", "a.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"real/new/f": "sub/new/f", "real/g": "sub/g", "deep/er/y": "deep/er/y"} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != want {
			t.Fatalf("%s: %q %v", p, b, err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(root, "sub")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the in-root link was replaced: %v %v", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "deep/er/x.secret")); !os.IsNotExist(err) {
		t.Fatalf("a denylisted name was written: %v", err)
	}
	if res.Skipped != 1 {
		t.Fatalf("result %+v", res)
	}

	// A link leading out, in the way: refused, nothing written outside,
	// nothing of the archive left.
	buf.Reset()
	gz = gzip.NewWriter(&buf)
	tw = tar.NewWriter(gz)
	add("base/out/new/", true)
	add("base/out/new/f", false)
	_ = tw.Close()
	_ = gz.Close()
	if err := os.WriteFile(filepath.Join(root, "b.tar.gz"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(fsys).Decompress(context.Background(), "/", "b.tar.gz"); err == nil {
		t.Fatal("extracted through a link leading out")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("written outside the root: %v", entries)
	}
}
