package sandbox

import (
	"github.com/wharf/wharf/internal/testutil/deeptree"

	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const kib = 1024

// limitedFixture is a fixture whose limit is its current usage plus extra.
func limitedFixture(t *testing.T, extra int64) (*fixture, int64) {
	t.Helper()
	fx := newFixture(t)
	base, err := fx.fs.RefreshUsage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fx.fs.SetDiskLimit(base + extra)
	return fx, base
}

// writeUntilFull writes chunk after chunk through w until ErrNoSpace (or
// max bytes), and fails on any other error.
func writeUntilFull(t *testing.T, w *File, chunk, most int) int {
	t.Helper()
	buf := bytes.Repeat([]byte{'x'}, chunk)
	n := 0
	for n < most {
		k, err := w.Write(buf[:min(chunk, most-n)])
		n += k
		if errors.Is(err, ErrNoSpace) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// onDisk is what the limit must hold against: the tree's allocated bytes
// plus the files removed but still open by this process.
func onDisk(t *testing.T, root string) int64 {
	t.Helper()
	n := diskBytes(t, root)
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if !bytes.HasSuffix([]byte(target), []byte(" (deleted)")) {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/self/fd/"+e.Name(), &st) == nil && st.Nlink == 0 {
			n += max(st.Blocks*512, blockSize)
		}
	}
	return n
}

// TestTruncateThroughSecondHandleKeepsLimit: 900 KiB written through one
// handle, truncated to 0 through another (O_TRUNC, then setstat's way:
// O_WRONLY and Truncate), and the first handle keeps writing at its
// offset: what is on disk never passes the limit by more than one write.
func TestTruncateThroughSecondHandleKeepsLimit(t *testing.T) {
	for _, how := range []string{"O_TRUNC", "Truncate"} {
		t.Run(how, func(t *testing.T) {
			fx, base := limitedFixture(t, 1024*kib)
			w, err := fx.fs.Create("a.bin")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if n := writeUntilFull(t, w, 32*kib, 900*kib); n != 900*kib {
				t.Fatalf("first 900 KiB: wrote %d", n)
			}
			if how == "O_TRUNC" {
				w2, err := fx.fs.OpenFile("a.bin", os.O_WRONLY|os.O_TRUNC, 0)
				if err != nil {
					t.Fatal(err)
				}
				_ = w2.Close()
			} else {
				w2, err := fx.fs.OpenFile("a.bin", os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				if err := w2.Truncate(0); err != nil {
					t.Fatal(err)
				}
				_ = w2.Close()
			}
			if u := fx.fs.Usage(); u != base+blockSize {
				t.Fatalf("usage after truncate %d, want %d", u, base+blockSize)
			}
			// The first handle's offset is 900 KiB: it writes after a hole.
			n := writeUntilFull(t, w, 32*kib, 8*1024*kib)
			if n < 900*kib || n > 1024*kib {
				t.Fatalf("after the truncate the first handle wrote %d bytes, want what is left (<= 1 MiB)", n)
			}
			if got, lim := onDisk(t, fx.root), fx.fs.DiskLimit(); got > lim+32*kib {
				t.Fatalf("on disk %d, limit %d", got, lim)
			}
			if u := fx.fs.Usage(); u != diskBytes(t, fx.root) {
				t.Fatalf("usage %d, on disk %d", u, diskBytes(t, fx.root))
			}
		})
	}
}

// TestRemovedOpenFilesStayCharged: five files written and removed while
// open keep their blocks until closed; the close gives them back.
func TestRemovedOpenFilesStayCharged(t *testing.T) {
	fx, base := limitedFixture(t, 1024*kib)
	var open []*File
	for i := range 5 {
		w, err := fx.fs.Create("f" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, w)
	}
	total := 0
	for i, w := range open {
		name := "f" + strconv.Itoa(i)
		total += writeUntilFull(t, w, 32*kib, 900*kib)
		if err := fx.fs.Remove(name); err != nil {
			t.Fatal(err)
		}
		if got, lim := onDisk(t, fx.root), fx.fs.DiskLimit(); got > lim+32*kib {
			t.Fatalf("after file %d: on disk %d, limit %d", i, got, lim)
		}
	}
	if total > 1024*kib {
		t.Fatalf("wrote %d bytes in five removed files on a 1 MiB limit", total)
	}
	if u, _ := fx.fs.RefreshUsage(context.Background()); u < base+int64(total) {
		t.Fatalf("walk forgot the removed open files: %d < %d", u, base+int64(total))
	}
	for _, w := range open {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if u := fx.fs.Usage(); u != base {
		t.Fatalf("usage after the last close %d, want %d", u, base)
	}
}

// TestRenameOverOpenFile: a file replaced by WriteFileAtomic while open
// through a handle stays charged until that handle closes.
func TestRenameOverOpenFile(t *testing.T) {
	fx, base := limitedFixture(t, 1024*kib)
	w, err := fx.fs.Create("a.bin")
	if err != nil {
		t.Fatal(err)
	}
	if n := writeUntilFull(t, w, 32*kib, 512*kib); n != 512*kib {
		t.Fatalf("wrote %d", n)
	}
	if err := fx.fs.WriteFileAtomic("a.bin", bytes.NewReader([]byte("small")), 0); err != nil {
		t.Fatal(err)
	}
	if u := fx.fs.Usage(); u != base+512*kib+blockSize {
		t.Fatalf("usage with the old file open %d, want %d", u, base+512*kib+blockSize)
	}
	if err := fx.fs.WriteFileAtomic("b.bin", bytes.NewReader(make([]byte, 600*kib)), 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("600 KiB more with the replaced file still open = %v", err)
	}
	_ = w.Close()
	if u := fx.fs.Usage(); u != base+blockSize {
		t.Fatalf("usage after close %d, want %d", u, base+blockSize)
	}
}

// TestHardLinkRemoval: removing one name of a file with two releases
// nothing; removing the last releases its blocks.
func TestHardLinkRemoval(t *testing.T) {
	fx, base := limitedFixture(t, 1024*kib)
	if err := fx.fs.WriteFileAtomic("a.bin", bytes.NewReader(make([]byte, 100*kib)), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(fx.root, "a.bin"), filepath.Join(fx.root, "b.bin")); err != nil {
		t.Fatal(err)
	}
	if u, _ := fx.fs.RefreshUsage(context.Background()); u != base+100*kib {
		t.Fatalf("two names: usage %d, want %d", u, base+100*kib)
	}
	if err := fx.fs.Remove("a.bin"); err != nil || fx.fs.Usage() != base+100*kib {
		t.Fatalf("one name removed: %v, usage %d", err, fx.fs.Usage())
	}
	if err := fx.fs.Remove("b.bin"); err != nil || fx.fs.Usage() != base {
		t.Fatalf("last name removed: %v, usage %d", err, fx.fs.Usage())
	}
}

// TestSparseFileCostsItsBlocks: a 1 GiB file made by Truncate costs what
// it occupies (one block), on a 64 KiB limit; writing into its hole costs
// the blocks written.
func TestSparseFileCostsItsBlocks(t *testing.T) {
	fx, base := limitedFixture(t, 64*kib)
	w, err := fx.fs.Create("sparse")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	if u := fx.fs.Usage(); u != base+blockSize {
		t.Fatalf("usage of a 1 GiB hole %d, want %d", u, base+blockSize)
	}
	if _, err := w.WriteAt(make([]byte, 8*kib), 512<<20); err != nil {
		t.Fatal(err)
	}
	if u := fx.fs.Usage(); u != base+8*kib {
		t.Fatalf("usage after 8 KiB in the hole %d, want %d", u, base+8*kib)
	}
	if _, err := w.WriteAt(make([]byte, 64*kib), 256<<20); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("64 KiB more in the hole = %v, want ErrNoSpace", err)
	}
	if u, _ := fx.fs.RefreshUsage(context.Background()); u != base+8*kib {
		t.Fatalf("walk: %d, want %d", u, base+8*kib)
	}
}

// TestEveryEntryCostsABlock: empty files, directories and links cost 4 KiB
// each, checked before the entry is made, and removing one gives it back.
func TestEveryEntryCostsABlock(t *testing.T) {
	fx, base := limitedFixture(t, 10*blockSize)
	made := 0
	for i := range 100 {
		name := "e" + strconv.Itoa(i)
		var err error
		switch i % 4 {
		case 0:
			var w *File
			if w, err = fx.fs.Create(name); err == nil {
				_ = w.Close()
			}
		case 1:
			err = fx.fs.Mkdir(name, 0)
		case 2:
			err = fx.fs.Symlink("e0", name)
		case 3:
			var d *Dir
			if d, err = fx.fs.OpenDir("."); err == nil {
				var w *File
				if w, err = d.Create(name, 0); err == nil {
					_ = w.Close()
				}
				_ = d.Close()
			}
		}
		if errors.Is(err, ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		made++
	}
	if made != 10 {
		t.Fatalf("made %d entries on a 10-block limit", made)
	}
	if err := fx.fs.MkdirAll("x/y", 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("MkdirAll at the limit = %v", err)
	}
	if err := fx.fs.WriteFileAtomic("w", bytes.NewReader(nil), 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("WriteFileAtomic at the limit = %v", err)
	}
	if u, _ := fx.fs.RefreshUsage(context.Background()); u != base+10*blockSize {
		t.Fatalf("walk: %d, want %d", u, base+10*blockSize)
	}
	if err := fx.fs.RemoveAll(context.Background(), "e1"); err != nil || fx.fs.Usage() != base+9*blockSize {
		t.Fatalf("RemoveAll of a directory: %v, usage %d", err, fx.fs.Usage())
	}
	if err := fx.fs.Remove("e2"); err != nil || fx.fs.Usage() != base+8*blockSize {
		t.Fatalf("Remove of a link: %v, usage %d", err, fx.fs.Usage())
	}
	// A full server can still open an existing file with O_CREATE to empty it.
	fx.fs.SetDiskLimit(fx.fs.Usage())
	w, err := fx.fs.OpenFile("e0", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0)
	if err != nil {
		t.Fatalf("O_CREATE of an existing file at the limit: %v", err)
	}
	_ = w.Close()
}

// TestConcurrentWritersStayUnderLimit: writers on one file through
// separate handles and on separate files, at once (run with -race): the
// disk never holds more than the limit plus one write per writer, and the
// usage ends equal to the walk.
func TestConcurrentWritersStayUnderLimit(t *testing.T) {
	const writers, chunk = 8, 16 * kib
	fx, _ := limitedFixture(t, 2048*kib)
	var files []*File
	for i := range writers {
		name := "shared"
		if i%2 == 1 {
			name = "own" + strconv.Itoa(i)
		}
		w, err := fx.fs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, w)
	}
	var wg sync.WaitGroup
	for i, w := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close()
			buf := make([]byte, chunk)
			for k := range 400 {
				off := int64((k*writers + i) * chunk)
				if _, err := w.WriteAt(buf, off); errors.Is(err, ErrNoSpace) {
					return
				} else if err != nil {
					t.Error(err)
					return
				}
				if k%50 == 0 && i == 0 {
					_ = w.Truncate(0)
				}
			}
		}()
	}
	wg.Wait()
	if got, lim := diskBytes(t, fx.root), fx.fs.DiskLimit(); got > lim+writers*chunk {
		t.Fatalf("on disk %d, limit %d", got, lim)
	}
	if u := fx.fs.Usage(); u != diskBytes(t, fx.root) {
		t.Fatalf("usage %d, walk %d", u, diskBytes(t, fx.root))
	}
}

// withFileLimit runs fn with the soft RLIMIT_NOFILE set to what is open
// now plus spare.
func withFileLimit(t *testing.T, spare int, fn func()) {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	// len(es) counts the descriptor that listed /proc/self/fd, closed now.
	lim := unix.Rlimit{Cur: uint64(len(es) - 1 + spare), Max: old.Max}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Setrlimit(unix.RLIMIT_NOFILE, &old) }()
	fn()
}

// TestUsageOfDeepTreeUnderDescriptorPressure: a tree 2,500 levels deep
// with 5 MiB at the bottom, walked with 16 descriptors to spare: the walk
// counts all of it. With none to spare it cannot read the tree, says so,
// and the server counts as over its limit.
func TestUsageOfDeepTreeUnderDescriptorPressure(t *testing.T) {
	fx, _ := limitedFixture(t, 1024*kib)
	if err := deeptree.ChainWithFile(fx.root, 2500, 5<<20); err != nil {
		t.Fatal(err)
	}
	var u int64
	var err error
	withFileLimit(t, 16, func() { u, err = fx.fs.RefreshUsage(context.Background()) })
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(5<<20 + 2500*blockSize); u < want {
		t.Fatalf("usage %d, want at least %d", u, want)
	}
	fx.fs.SetDiskLimit(1024 * kib)
	withFileLimit(t, 0, func() { u, err = fx.fs.RefreshUsage(context.Background()) })
	if err == nil {
		t.Fatal("a walk without a descriptor to spare reported no error")
	}
	if u <= fx.fs.DiskLimit() || fx.fs.HasSpaceFor(1) == nil {
		t.Fatalf("unreadable tree: usage %d, limit %d", u, fx.fs.DiskLimit())
	}
}
