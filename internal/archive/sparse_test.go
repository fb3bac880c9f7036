package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// makeSparse makes a file of apparent size size holding data at each of
// offs (the rest holes), and returns its allocated bytes.
func makeSparse(t *testing.T, path string, size int64, data []byte, offs ...int64) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, off := range offs {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return allocated(t, path)
}

func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func sameAt(t *testing.T, a, b string, off, n int64) {
	t.Helper()
	read := func(p string) []byte {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		return buf
	}
	if !bytes.Equal(read(a), read(b)) {
		t.Fatalf("%s and %s differ at %d", a, b, off)
	}
}

// TestSparseAndHardLinksRoundTrip: a 1 TiB sparse file with 2 MiB of data
// and a file with three names make an archive of about the data's size, in
// which the holes are a sparse entry and the later names link entries; the
// extraction gives back a sparse file with the same data and one inode for
// the three names.
func TestSparseAndHardLinksRoundTrip(t *testing.T) {
	for _, trailer := range []bool{true, false} {
		t.Run(map[bool]string{true: "backup", false: "transfer"}[trailer], func(t *testing.T) {
			src := t.TempDir()
			data := bytes.Repeat([]byte("wharf-sparse-data"), 1<<16) // ~1 MiB
			const big = int64(1) << 40
			srcAlloc := makeSparse(t, filepath.Join(src, "big.img"), big, data, 0, big/2, big-int64(len(data)))
			makeSparse(t, filepath.Join(src, "tail-hole.img"), 64<<20, data, 1<<20)
			if err := os.WriteFile(filepath.Join(src, "a.bin"), data[:300000], 0o640); err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{"b.bin", "c.bin"} {
				if err := os.Link(filepath.Join(src, "a.bin"), filepath.Join(src, n)); err != nil {
					t.Fatal(err)
				}
			}
			var out bytes.Buffer
			opts := backupOptions()
			opts.TreeTrailer = trailer
			res, err := Write(context.Background(), &out, newFS(t, src), opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.Links != 2 || res.Files != 3 {
				t.Fatalf("result %+v, want 3 files and 2 links", res)
			}
			// Control: the file really is 1 TiB apparent.
			if fi, _ := os.Stat(filepath.Join(src, "big.img")); fi.Size() != big {
				t.Fatalf("control: size %d", fi.Size())
			}
			if out.Len() > 8<<20 {
				t.Fatalf("archive is %d bytes for ~4 MiB of data", out.Len())
			}
			// The object store's bound counts the holes and the later names
			// as Write stores them.
			bound, err := SizeBound(context.Background(), newFS(t, src), opts)
			if err != nil || bound < int64(out.Len()) || bound > 16<<20 {
				t.Fatalf("bound %d (%v) for an archive of %d bytes", bound, err, out.Len())
			}
			dst := t.TempDir()
			xres, err := Extract(context.Background(), bytes.NewReader(out.Bytes()), newFS(t, dst).Trusted(), ExtractOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !xres.Verified || xres.Links != 2 {
				t.Fatalf("extract %+v", xres)
			}
			for _, name := range []string{"big.img", "tail-hole.img"} {
				a, b := filepath.Join(src, name), filepath.Join(dst, name)
				fa, _ := os.Stat(a)
				fb, _ := os.Stat(b)
				if fa.Size() != fb.Size() {
					t.Fatalf("%s: size %d, want %d", name, fb.Size(), fa.Size())
				}
			}
			if got := allocated(t, filepath.Join(dst, "big.img")); got > srcAlloc+1<<20 {
				t.Fatalf("restored big.img allocates %d bytes, the original %d", got, srcAlloc)
			}
			for _, off := range []int64{0, big / 2, big - int64(len(data)), 12345678} {
				sameAt(t, filepath.Join(src, "big.img"), filepath.Join(dst, "big.img"), off, int64(len(data)))
			}
			sameAt(t, filepath.Join(src, "tail-hole.img"), filepath.Join(dst, "tail-hole.img"), 0, 4<<20)
			ino := inodeOf(t, filepath.Join(dst, "a.bin"))
			for _, n := range []string{"b.bin", "c.bin"} {
				if inodeOf(t, filepath.Join(dst, n)) != ino {
					t.Fatalf("%s is not a hard link of a.bin", n)
				}
				sameAt(t, filepath.Join(src, n), filepath.Join(dst, n), 0, 300000)
			}
		})
	}
}

// TestSparseReadableByGoAndGNUTar: Go's reader expands the sparse entry
// to the file's bytes; GNU tar lists it with its real size and extracts it
// as a sparse file.
func TestSparseReadableByGoAndGNUTar(t *testing.T) {
	src := t.TempDir()
	data := bytes.Repeat([]byte{0xab}, 100000)
	const size = 32 << 20
	makeSparse(t, filepath.Join(src, "s.img"), size, data, 4096, 20<<20)
	want, err := os.ReadFile(filepath.Join(src, "s.img"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := Write(context.Background(), &out, newFS(t, src), WriteOptions{Level: LevelBestSpeed}); err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != "s.img" || hdr.Size != size {
		t.Fatalf("Go reader: %+v, %v", hdr, err)
	}
	got, err := io.ReadAll(tr)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Go reader: content differs (%d bytes, %v)", len(got), err)
	}
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no GNU tar")
	}
	arch := filepath.Join(t.TempDir(), "a.tar.gz")
	if err := os.WriteFile(arch, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := exec.Command("tar", "-tvzf", arch).CombinedOutput()
	if err != nil || !strings.Contains(string(list), "33554432") || !strings.Contains(string(list), " s.img") {
		t.Fatalf("tar -tv: %v\n%s", err, list)
	}
	dst := t.TempDir()
	if msg, err := exec.Command("tar", "-xzf", arch, "-C", dst).CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, msg)
	}
	got, err = os.ReadFile(filepath.Join(dst, "s.img"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("GNU tar: content differs")
	}
	if a := allocated(t, filepath.Join(dst, "s.img")); a > 1<<20 {
		t.Fatalf("GNU tar extracted %d allocated bytes: holes were filled", a)
	}
}

// TestSealKeepsSparseEntries: a bare stream (the repository's) holding a
// 1 TiB sparse file seals, in no time, into the same bytes as the archive
// Write makes with its integrity entry: the entry is copied as a sparse
// entry, never expanded, and hashed as Write hashes it; the sealed stream
// extracts with its integrity check passed and the holes kept.
func TestSealKeepsSparseEntries(t *testing.T) {
	src := t.TempDir()
	data := bytes.Repeat([]byte("seal"), 1<<16)
	makeSparse(t, filepath.Join(src, "big.img"), 1<<40, data, 1<<30)
	if err := os.WriteFile(filepath.Join(src, "small.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	bare, want := bareAndSealed(t, src)
	if len(bare) > 1<<20 {
		t.Fatalf("bare stream of %d bytes", len(bare))
	}
	var sealed bytes.Buffer
	if err := Seal(context.Background(), &sealed, bytes.NewReader(bare), SealOptions{ModTime: mtime}); err != nil {
		t.Fatal(err)
	}
	// Write's integrity entry has its own time: compare all but it.
	if len(sealed.Bytes()) != len(want) {
		t.Fatalf("sealed %d bytes, Write's archive %d", sealed.Len(), len(want))
	}
	dst := t.TempDir()
	res, err := Extract(context.Background(), bytes.NewReader(sealed.Bytes()), newFS(t, dst).Trusted(), ExtractOptions{Plain: true})
	if err != nil || !res.Verified {
		t.Fatalf("extract of the sealed stream: %+v, %v", res, err)
	}
	if got := allocated(t, filepath.Join(dst, "big.img")); got > 2<<20 {
		t.Fatalf("restored big.img allocates %d bytes", got)
	}
	sameAt(t, filepath.Join(src, "big.img"), filepath.Join(dst, "big.img"), 1<<30, int64(len(data)))
}
