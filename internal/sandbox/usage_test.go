package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// TestUsageCountsHardLinksOnce: a file with three names counts once.
func TestUsageCountsHardLinksOnce(t *testing.T) {
	fx := newFixture(t)
	f := fx.fs
	if err := f.WriteFileAtomic("big.bin", bytes.NewReader(make([]byte, 1000)), 0); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"h1", "inside/h2"} {
		if err := os.Link(filepath.Join(fx.root, "big.bin"), filepath.Join(fx.root, n)); err != nil {
			t.Fatal(err)
		}
	}
	u, err := f.RefreshUsage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := diskBytes(t, fx.root); u != want {
		t.Fatalf("usage = %d, want %d", u, want)
	}
	// Counted three times, big.bin would add two more blocks.
	if u >= diskBytes(t, fx.root)+2*blockSize {
		t.Fatal("hard links counted more than once")
	}
	if f.Usage() != u {
		t.Fatal("Usage() is not the refreshed value")
	}
}

// TestCreateModesAndOwner: new files are 0644 and directories 0755 whatever
// the umask, and get the configured owner.
func TestCreateModesAndOwner(t *testing.T) {
	fx := newFixture(t, Options{UID: 1234, GID: 5678})
	f := fx.fs
	if err := f.MkdirAll("a/b", 0); err != nil {
		t.Fatal(err)
	}
	w, err := f.Create("a/b/c.txt")
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if err := f.Symlink("c.txt", "a/b/l"); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{"a": 0o755 | os.ModeDir, "a/b": 0o755 | os.ModeDir, "a/b/c.txt": 0o644} {
		fi, err := os.Lstat(filepath.Join(fx.root, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode {
			t.Errorf("%s mode %v, want %v", p, fi.Mode(), mode)
		}
		if uid, gid := owner(fi); os.Geteuid() == 0 && (uid != 1234 || gid != 5678) {
			t.Errorf("%s owner %d:%d", p, uid, gid)
		}
	}
	if fi, _ := os.Lstat(filepath.Join(fx.root, "a/b/l")); os.Geteuid() == 0 {
		if uid, _ := owner(fi); uid != 1234 {
			t.Errorf("link owner %d", uid)
		}
	}
}

// TestErrorsNameRelativePaths: errors satisfy errors.Is for the sentinels
// and the fs equivalents, and name the path relative to the root.
func TestErrorsNameRelativePaths(t *testing.T) {
	fx := newFixture(t)
	_, err := fx.fs.Open("/plugins/none.jar")
	if err == nil || err.Error() != "open /plugins/none.jar: file does not exist" {
		t.Fatalf("error text %q", err)
	}
	if err := fx.fs.Copy("top.txt", "inside/file.txt"); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("copy onto existing = %v", err)
	}
	if err := fx.fs.Remove("/"); err == nil {
		t.Fatal("removing the root succeeded")
	}
	if _, err := fx.fs.ReadFile("top.txt", 2); err == nil {
		t.Fatal("ReadFile limit not enforced")
	}
}

// FuzzResolve: whatever the name, anything an operation creates lies inside
// the root and nothing outside changes.
func FuzzResolve(f *testing.F) {
	for _, n := range append(hostileNames, "a/b/c", "/x", "goodlink/y", "inside/../z", "a//b/./c/", "\x00", "....//x") {
		f.Add(n)
	}
	fx := newFixture(f)
	before := fx.snapshot(f)
	f.Fuzz(func(t *testing.T, name string) {
		if w, err := fx.fs.Create(name); err == nil {
			_, _ = w.Write([]byte("x"))
			_ = w.Close()
		}
		_ = fx.fs.MkdirAll(name+"/d", 0)
		_ = fx.fs.WriteFileAtomic(name+".a", bytes.NewReader([]byte("y")), 0)
		_ = fx.fs.Chmod(name, 0o777)
		_ = fx.fs.Symlink("/", name+".l")
		_, _ = fx.fs.ReadFile(name, 0)
		fx.assertOutsideUnchanged(t, before)
	})
}

// BenchmarkUsageWalk: RefreshUsage over a tree of 100 000 files.
func BenchmarkUsageWalk(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a 100 000-file tree")
	}
	dir := b.TempDir()
	const files, perDir = 100_000, 1000
	for d := range files / perDir {
		sub := filepath.Join(dir, "d"+strconv.Itoa(d/10), "e"+strconv.Itoa(d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for i := range perDir {
			if err := os.WriteFile(filepath.Join(sub, strconv.Itoa(i)), []byte("0123456789"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	f, err := New(dir, Options{UID: -1, GID: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	want := diskBytes(b, dir)
	if want < int64(files+files/perDir+10)*blockSize {
		b.Fatalf("the tree occupies %d bytes: fewer than a block per entry", want)
	}
	b.ResetTimer()
	for b.Loop() {
		n, err := f.RefreshUsage(context.Background())
		if err != nil || n != want {
			b.Fatalf("usage %d, %v", n, err)
		}
	}
	b.ReportMetric(float64(files), "files/op")
}

// makeTree writes n files of size bytes in nested directories and refreshes the usage.
func makeTree(t *testing.T, f *FS, n, size int) {
	t.Helper()
	for i := range n {
		name := "tree/d" + strconv.Itoa(i%7) + "/e" + strconv.Itoa(i%3) + "/f" + strconv.Itoa(i)
		if err := f.MkdirAll(filepath.Dir(name), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.WriteFileAtomic(name, bytes.NewReader(make([]byte, size)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.RefreshUsage(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestRemoveAllReleasesUsage: RemoveAll of a tree releases exactly its files' bytes, a link is
// removed as a link, and the root's RemoveAll keeps the root directory and zeroes the usage.
func TestRemoveAllReleasesUsage(t *testing.T) {
	fx := newFixture(t)
	f := fx.fs
	before, _ := f.RefreshUsage(context.Background())
	makeTree(t, f, 60, 100)
	if want := diskBytes(t, fx.root); f.Usage() != want || want < before+60*blockSize {
		t.Fatalf("usage %d, want %d (> %d + 60 blocks)", f.Usage(), want, before)
	}
	if err := f.RemoveAll(context.Background(), "/tree/"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(fx.root, "tree")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("tree still there: %v", err)
	}
	if f.Usage() != before {
		t.Fatalf("usage after RemoveAll %d, want %d", f.Usage(), before)
	}
	if err := f.RemoveAll(context.Background(), "no/such/dir"); err != nil {
		t.Fatalf("RemoveAll of a missing name: %v", err)
	}
	if err := f.RemoveAll(context.Background(), "/"); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(fx.root)
	if err != nil || len(entries) != 0 || f.Usage() != 0 {
		t.Fatalf("root after RemoveAll: %v %v usage %d", entries, err, f.Usage())
	}
}

// TestRemoveAllStopsOnCancel: a cancelled context stops the removal before the next entry; what
// was removed is released from the usage and the rest stays, counted.
func TestRemoveAllStopsOnCancel(t *testing.T) {
	fx := newFixture(t)
	f := fx.fs
	makeTree(t, f, 60, 100)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.RemoveAll(ctx, "tree"); !errors.Is(err, context.Canceled) {
		t.Fatalf("RemoveAll with a cancelled context = %v", err)
	}
	if err := f.RemoveAll(ctx, "."); !errors.Is(err, context.Canceled) {
		t.Fatalf("RemoveAll(.) with a cancelled context = %v", err)
	}
	if _, err := os.Stat(filepath.Join(fx.root, "tree", "d0", "e0", "f0")); err != nil {
		t.Fatalf("a cancelled RemoveAll removed files: %v", err)
	}

	// Cancel half-way: the walk notices at the next entry.
	removed := 0
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	ctx = &cancelAfter{Context: ctx, n: 30, cancel: cancel, count: &removed}
	if err := f.RemoveAll(ctx, "tree"); !errors.Is(err, context.Canceled) {
		t.Fatalf("RemoveAll cancelled half-way = %v", err)
	}
	left, err := f.s.du(context.Background(), "tree")
	if err != nil {
		t.Fatal(err)
	}
	if full := int64((60 + 7 + 21 + 1) * blockSize); left == 0 || left >= full {
		t.Fatalf("%d bytes left: the removal did not stop half-way", left)
	}
	cached := f.Usage()
	if got, _ := f.RefreshUsage(context.Background()); cached != got {
		t.Fatalf("usage %d is not what is left on disk (%d)", cached, got)
	}
}

// cancelAfter is a context that cancels itself after n checks of Err.
type cancelAfter struct {
	context.Context
	n      int
	cancel context.CancelFunc
	count  *int
}

func (c *cancelAfter) Err() error {
	*c.count++
	if *c.count == c.n {
		c.cancel()
	}
	return c.Context.Err()
}

// diskBytes is what the disk limit counts below root, computed apart from
// du: every entry's allocated bytes, at least one block, a file with
// several links once, the root itself not counted.
func diskBytes(t testing.TB, root string) int64 {
	t.Helper()
	n, err := diskBytesOf(root)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func diskBytesOf(root string) (int64, error) {
	var n int64
	seen := map[uint64]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		n += max(st.Blocks*512, blockSize)
		return nil
	})
	return n, err
}
