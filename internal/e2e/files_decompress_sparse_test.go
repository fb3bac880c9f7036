package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// sparseSource makes dir/w/r.dat: size bytes, all hole but 1 MiB of random
// data at at; it returns the data.
func sparseSource(t *testing.T, dir string, size, at int64) []byte {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "w"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	f, err := os.Create(filepath.Join(dir, "w", "r.dat"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, at); err != nil {
		t.Fatal(err)
	}
	return data
}

// gnuTar runs GNU tar with args.
func gnuTar(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("tar", args...).CombinedOutput(); err != nil {
		t.Fatalf("tar %v: %v %s", args, err, out)
	}
}

// Issue 33 "decompress writes holes": archives GNU tar made of an 8 TiB
// file holding 1 MiB of data, in the three PAX sparse formats, decompress
// under a 64 MiB disk limit into a file of 8 TiB that allocates about
// 1 MiB, its data where it was. Before, the hole was written as zeros and
// the extraction failed on the disk limit (the control: the same archives
// are refused by the limit when the hole is expanded, see
// files.TestDecompressSparse8TiB's control on main). The old GNU type 'S',
// whose map Go's reader keeps to itself, is written whole as before.
func TestDecompressSparseArchivesKeepHoles(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 64, nil)
	const size, at = 8 << 40, 4 << 40
	src := t.TempDir()
	data := sparseSource(t, src, size, at)
	for _, v := range []string{"1.0", "0.1", "0.0"} {
		dir := "pax" + strings.ReplaceAll(v, ".", "")
		if err := os.MkdirAll(n.fpath(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		gnuTar(t, "--sparse", "--posix", "--sparse-version="+v, "-czf", n.fpath(dir+"/a.tar.gz"), "-C", src, ".")
		res, body := n.files("POST", "decompress", map[string]string{"root": "/" + dir, "file": "a.tar.gz"})
		wantStatus(t, "sparse "+v, res, body, 204)
		f, err := os.Open(n.fpath(dir + "/w/r.dat"))
		if err != nil {
			t.Fatalf("sparse %s: %v", v, err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data)+4096)
		_, rerr := f.ReadAt(got, at-4096)
		_ = f.Close()
		if rerr != nil {
			t.Fatal(rerr)
		}
		if st.Size != size || st.Blocks*512 > 2<<20 {
			t.Fatalf("sparse %s: size %d, allocated %d bytes; want %d with about 1 MiB allocated", v, st.Size, st.Blocks*512, int64(size))
		}
		if !bytes.Equal(got[4096:], data) || !bytes.Equal(got[:4096], make([]byte, 4096)) {
			t.Fatalf("sparse %s: the data is not where it was", v)
		}
		_ = os.RemoveAll(n.fpath(dir))
	}
	// The old GNU format ('S'), whose map Go's reader keeps to itself: written
	// whole, holes as zeros, as before (a small file: 8 MiB, 1 MiB of data).
	small := t.TempDir()
	data = sparseSource(t, small, 8<<20, 4<<20)
	if err := os.MkdirAll(n.fpath("gnu"), 0o755); err != nil {
		t.Fatal(err)
	}
	gnuTar(t, "--sparse", "--format=gnu", "-czf", n.fpath("gnu/a.tar.gz"), "-C", small, ".")
	res, body := n.files("POST", "decompress", map[string]string{"root": "/gnu", "file": "a.tar.gz"})
	wantStatus(t, "old GNU sparse", res, body, 204)
	got, err := os.ReadFile(n.fpath("gnu/w/r.dat"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 8<<20 || !bytes.Equal(got[4<<20:5<<20], data) || !bytes.Equal(got[:4<<20], make([]byte, 4<<20)) {
		t.Fatalf("old GNU sparse entry: %d bytes, not the file", len(got))
	}
}

// Attack: a sparse map that claims a 90 TiB file (all hole but 1 MiB) is
// refused with a 400 that says so, before anything is written, and nothing
// is left. Before, the child expanded the hole into zeros until the disk
// limit stopped it (with no limit, until its CPU limit: half an hour of a
// core). The control: the same archive with its true size (10 TiB)
// extracts.
func TestDecompressSparseAbsurdSizeRefused(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 64, nil)
	src := t.TempDir()
	sparseSource(t, src, 10<<40, 1<<30)
	arc := filepath.Join(t.TempDir(), "a.tar")
	gnuTar(t, "--sparse", "--posix", "-cf", arc, "-C", src, ".")
	good, err := os.ReadFile(arc)
	if err != nil {
		t.Fatal(err)
	}
	const real = "GNU.sparse.realsize=10995116277760"
	if !bytes.Contains(good, []byte(real)) {
		t.Fatal("no realsize record to change")
	}
	mustWrite(t, n.fpath("good/a.tar"), string(good), 0o644)
	res, body := n.files("POST", "decompress", map[string]string{"root": "/good", "file": "a.tar"})
	wantStatus(t, "control", res, body, 204)

	bad := bytes.Replace(good, []byte(real), []byte("GNU.sparse.realsize=99999999999999"), 1)
	mustWrite(t, n.fpath("bad/a.tar"), string(bad), 0o644)
	res, body = n.files("POST", "decompress", map[string]string{"root": "/bad", "file": "a.tar"})
	wantStatus(t, "absurd sparse size", res, body, 400)
	var e struct{ Error string }
	_ = json.Unmarshal(body, &e)
	if !strings.Contains(e.Error, "more than a file may have") {
		t.Fatalf("error %q does not say why", e.Error)
	}
	if entries, _ := os.ReadDir(n.fpath("bad")); len(entries) != 1 {
		t.Fatalf("after the refusal bad/ holds %v", entries)
	}
}
