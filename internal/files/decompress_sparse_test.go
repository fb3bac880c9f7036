package files

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/usererr"
)

// sparseTar is an uncompressed tar holding world/region.dat, a file of
// size bytes (a hole) with data at dataAt, as archive.Write stores it (a GNU
// sparse 1.0 entry), and the data.
func sparseTar(t *testing.T, size, dataAt int64) ([]byte, []byte) {
	t.Helper()
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "world"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	f, err := os.Create(filepath.Join(src, "world", "region.dat"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, dataAt); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	fsys, err := sandbox.New(src, sandbox.Options{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	var gz bytes.Buffer
	if _, err := archive.Write(context.Background(), &gz, fsys, archive.WriteOptions{Level: archive.ParseLevel("")}); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&gz)
	if err != nil {
		t.Fatal(err)
	}
	tarBytes, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(tarBytes, []byte("GNU.sparse.major=1")) {
		t.Fatal("the archive holds no sparse entry")
	}
	return tarBytes, data
}

// sparseRoot is a server root with a 64 MiB limit holding the archive as
// a.tar.
func sparseRoot(t *testing.T, arc []byte) (string, *sandbox.FS) {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.tar"), arc, 0o644); err != nil {
		t.Fatal(err)
	}
	fsys, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1, DiskLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })
	if _, err := fsys.RefreshUsage(context.Background()); err != nil {
		t.Fatal(err)
	}
	return root, fsys
}

// An 8 TiB file with 1 MiB of data extracts, under a 64 MiB limit, to a
// file of 8 TiB that allocates about 1 MiB, its data where it was and
// holes elsewhere; in the daemon's process and through the child alike.
func TestDecompressSparse8TiB(t *testing.T) {
	const size, at = 8 << 40, 4<<40 + 12345
	arc, data := sparseTar(t, size, at)
	for _, child := range []bool{false, true} {
		root, fsys := sparseRoot(t, arc)
		m := New(fsys)
		if child {
			m = isolated(fsys, WorkerCommand)
		}
		res, err := m.Decompress(context.Background(), "/", "a.tar")
		if err != nil {
			t.Fatalf("child %v: %v", child, err)
		}
		if res.Files != 1 || res.Bytes < 1<<20 || res.Bytes > 1<<20+8192 { // the fragments are whole blocks
			t.Fatalf("child %v: result %+v", child, res)
		}
		f, err := os.Open(filepath.Join(root, "world", "region.dat"))
		if err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		if st.Size != size || st.Blocks*512 > 2<<20 {
			t.Fatalf("child %v: size %d, allocated %d: want %d with about 1 MiB allocated", child, st.Size, st.Blocks*512, int64(size))
		}
		if off, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA); err != nil || off > at {
			t.Fatalf("child %v: first data at %d (%v), want at most %d", child, off, err, int64(at))
		}
		got := make([]byte, len(data)+8192)
		if _, err := f.ReadAt(got, at-4096); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		if !bytes.Equal(got[4096:4096+len(data)], data) || !bytes.Equal(got[:4096], make([]byte, 4096)) ||
			!bytes.Equal(got[4096+len(data):], make([]byte, 4096)) {
			t.Fatalf("child %v: the data is not where it was", child)
		}
		if u := fsys.Usage(); u > 4<<20 {
			t.Fatalf("child %v: usage %d counts more than what was allocated", child, u)
		}
	}
}

// Attack: a sparse map that claims a file larger than any disk holds (90
// TiB, all of it hole but 1 MiB) is refused with a clear error before
// anything is written, and nothing is left behind. Before holes were kept,
// the child expanded the hole into zeros until its CPU limit (half an hour).
// The control: the same archive with its real size (10 TiB) extracts.
func TestDecompressSparseAbsurdSizeRefused(t *testing.T) {
	const real = "10995116277760" // 10 TiB
	arc, _ := sparseTar(t, 10<<40, 1<<30)
	if !bytes.Contains(arc, []byte("GNU.sparse.realsize="+real)) {
		t.Fatal("no realsize record to change")
	}
	_, fsys := sparseRoot(t, arc)
	if _, err := isolated(fsys, WorkerCommand).Decompress(context.Background(), "/", "a.tar"); err != nil {
		t.Fatalf("control: %v", err)
	}
	bad := bytes.Replace(arc, []byte("GNU.sparse.realsize="+real), []byte("GNU.sparse.realsize=99999999999999"), 1)
	root, fsys := sparseRoot(t, bad)
	_, err := isolated(fsys, WorkerCommand).Decompress(context.Background(), "/", "a.tar")
	var ue *usererr.Error
	if !errors.As(err, &ue) || ue.Kind != usererr.Invalid {
		t.Fatalf("err = %v, want a user's error", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "world")); !os.IsNotExist(err) {
		t.Fatalf("something was left behind: %v", err)
	}
}
