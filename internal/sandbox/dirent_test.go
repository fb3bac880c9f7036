package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The entry operations of a Dir never act through a link at base: Sub,
// Mkdir, Symlink, Remove, Chmod and Rewrite on the fixture's links (in and
// out of the root) leave outside as it was, Remove takes the link itself,
// and bad bases are refused.
func TestDirEntryOpsNeverFollowLinks(t *testing.T) {
	fx := newFixture(t)
	before := fx.snapshot(t)
	root := mustOpenDir(t, fx.fs, ".")
	for _, base := range []string{"dirlink", "reldirlink", "goodlink", "filelink", "selfloop", "dangling"} {
		if d, err := root.Sub(base); err == nil {
			_ = d.Close()
			t.Errorf("Sub(%s) followed the link", base)
		} else if !errors.Is(err, ErrNotDir) {
			t.Errorf("Sub(%s) = %v, want ErrNotDir", base, err)
		}
		if err := root.Mkdir(base, 0); !errors.Is(err, fs.ErrExist) {
			t.Errorf("Mkdir(%s) = %v, want ErrExist", base, err)
		}
		if err := root.Symlink("x", base); !errors.Is(err, fs.ErrExist) {
			t.Errorf("Symlink(%s) = %v, want ErrExist", base, err)
		}
		if err := root.Chmod(base, 0o777); !errors.Is(err, ErrInvalid) {
			t.Errorf("Chmod(%s) = %v, want ErrInvalid", base, err)
		}
		if w, err := root.Rewrite(base); err == nil {
			_ = w.Close()
			t.Errorf("Rewrite(%s) followed the link", base)
		}
		if fi, err := root.Lstat(base); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("Lstat(%s) = %v, %v; want the link", base, fi, err)
		}
	}
	fx.assertOutsideUnchanged(t, before)
	for _, base := range []string{"dirlink", "filelink"} {
		if err := root.Remove(base); err != nil {
			t.Fatalf("Remove(%s): %v", base, err)
		}
		if _, err := os.Lstat(filepath.Join(fx.root, base)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there: %v", base, err)
		}
	}
	fx.assertOutsideUnchanged(t, before)
	for _, base := range []string{"", ".", "..", "a/b", "a\x00"} {
		if err := root.Mkdir(base, 0); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("Mkdir(%q) = %v, want ErrOutsideRoot", base, err)
		}
		if d, err := root.Sub(base); err == nil || !errors.Is(err, ErrOutsideRoot) {
			if d != nil {
				_ = d.Close()
			}
			t.Errorf("Sub(%q) = %v, want ErrOutsideRoot", base, err)
		}
	}
}

// Mkdir, Sub and Rewrite: a new directory has its mode and costs a
// block; Rewrite truncates a regular file in place. (Reaching a parent
// through ".." only while it is the same directory is fdwalk.Stack's:
// TestStackReopensThroughDotDotOnlyTheSameDirectory.)
func TestDirMkdirSubRewrite(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1, DiskLimit: 1 << 20})
	root := mustOpenDir(t, fx.fs, ".")
	used := fx.fs.Usage()
	if err := root.Mkdir("new", 0o701); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(fx.root, "new")); err != nil || fi.Mode().Perm() != 0o701 || !fi.IsDir() {
		t.Fatalf("new: %v, %v", fi, err)
	}
	if fx.fs.Usage() != used+blockSize {
		t.Errorf("usage %d, want %d", fx.fs.Usage(), used+blockSize)
	}
	sub, err := root.Sub("inside")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	nested, err := sub.Sub("nested")
	if err != nil {
		t.Fatal(err)
	}
	defer nested.Close()
	w, err := sub.Rewrite("file.txt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("new"); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if b, _ := os.ReadFile(filepath.Join(fx.root, "inside", "file.txt")); string(b) != "new" {
		t.Errorf("file.txt = %q, want %q", b, "new")
	}
	fx.fs.SetDiskLimit(-1)
	if err := root.Mkdir("refused", 0); !errors.Is(err, ErrNoSpace) {
		t.Errorf("Mkdir at limit -1 = %v, want ErrNoSpace", err)
	}
	if err := root.Symlink("x", "refused"); !errors.Is(err, ErrNoSpace) {
		t.Errorf("Symlink at limit -1 = %v, want ErrNoSpace", err)
	}
}

// Overwrite keeps the file's blocks and size: a shorter content written
// over it and the rest truncated leaves exactly that content, with the
// usage settled to what the file occupies; a link or FIFO is refused.
func TestDirOverwrite(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1, DiskLimit: 1 << 20})
	big := bytes.Repeat([]byte("x"), 64<<10)
	if err := os.WriteFile(filepath.Join(fx.root, "big.dat"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(fx.root, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := fx.fs.RefreshUsage(ctx); err != nil {
		t.Fatal(err)
	}
	root := mustOpenDir(t, fx.fs, ".")
	w, size, err := root.Overwrite("big.dat")
	if err != nil || size != int64(len(big)) {
		t.Fatalf("Overwrite = %d, %v", size, err)
	}
	if _, err := w.WriteString("short"); err != nil {
		t.Fatal(err)
	}
	if err := w.Truncate(5); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if b, _ := os.ReadFile(filepath.Join(fx.root, "big.dat")); string(b) != "short" {
		t.Fatalf("big.dat = %q", b)
	}
	charged := fx.fs.Usage()
	if real, err := fx.fs.RefreshUsage(ctx); err != nil || real != charged {
		t.Fatalf("usage %d, on disk %d (%v)", charged, real, err)
	}
	for _, name := range []string{"pipe", "filelink"} {
		if w, _, err := root.Overwrite(name); err == nil {
			_ = w.Close()
			t.Errorf("Overwrite(%s) succeeded", name)
		}
	}
}
