package files

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mholt/archives"

	"github.com/wharf/wharf/internal/isolate"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/usererr"
)

// FuzzDecompress feeds Decompress every format it accepts: raw bytes (zip,
// 7z, rar, tar, single compressed files, anything), or a tar stream that
// the harness compresses with gzip, bzip2, xz, zstd or lz4, so that the
// fuzzer reaches the tar layer under each decoder with a valid stream. It
// runs the extraction as the daemon does, in the isolated child (this test
// binary as `extract-worker`, 256 MiB of address space), because a decoder
// asking for more memory than exists ends its process with a fatal error
// that no in-process harness survives (the 45-byte 7z bomb of issue 21,
// in the corpus, does; debug.SetMemoryLimit does not stop it: the
// runtime's request for the memory itself fails). A process per input
// costs some 20 ms: slow for a fuzzer, but it fuzzes what the daemon runs.
// For every input:
//   - Decompress returns, with nil or a user's error (400/403/404...),
//     never an internal error (a 500);
//   - nothing outside the root is created or changed;
//   - nothing in the root is a device, FIFO or socket, or carries setuid,
//     setgid or sticky bits, or is a hard link to the outside;
//   - after an error, nothing of the archive is left: the root holds what it
//     held before.
func FuzzDecompress(f *testing.F) {
	for _, s := range decompressSeeds(f) {
		f.Add(s.data, s.wrap)
	}
	f.Fuzz(func(t *testing.T, data []byte, wrap uint8) {
		if len(data) > 1<<20 {
			return
		}
		arc, err := wrapArchive(data, wrap)
		if err != nil {
			return
		}
		decompressChecked(t, arc)
	})
}

// The wrappers FuzzDecompress applies to its input.
var fuzzWrappers = []archives.Compressor{nil, archives.Gz{}, archives.Bz2{}, archives.Xz{}, archives.Zstd{}, archives.Lz4{}}

func wrapArchive(data []byte, wrap uint8) ([]byte, error) {
	c := fuzzWrappers[int(wrap)%len(fuzzWrappers)]
	if c == nil {
		return data, nil
	}
	var buf bytes.Buffer
	w, err := c.OpenWriter(&buf)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type fuzzSeed struct {
	data []byte
	wrap uint8
}

func decompressSeeds(tb testing.TB) []fuzzSeed {
	bomb, _ := hex.DecodeString("377abcaf271c00049b638bb600000000000000000d00000000000000dd28ba2a0105ff00000000000200000000")
	good7z, err := os.ReadFile(filepath.Join("testdata", "good.7z"))
	if err != nil {
		tb.Fatal(err)
	}
	tarball := seedTar(tb)
	seeds := []fuzzSeed{{bomb, 0}, {good7z, 0}, {seedZip(tb), 0}, {seedRar(), 0}, {tarball, 0}}
	for w := 1; w < len(fuzzWrappers); w++ {
		seeds = append(seeds, fuzzSeed{tarball, uint8(w)}) // tar.gz, tar.bz2, ...
		seeds = append(seeds, fuzzSeed{[]byte("a single compressed file\n"), uint8(w)})
	}
	return seeds
}

func seedTar(tb testing.TB) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Date(2021, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o750, ModTime: mt},
		{Typeflag: tar.TypeReg, Name: "d/f.txt", Mode: 0o4755, Size: 4, ModTime: mt},
		{Typeflag: tar.TypeSymlink, Name: "d/l", Linkname: "../../outside", ModTime: mt},
		{Typeflag: tar.TypeReg, Name: "d/l/x", Mode: 0o644, Size: 4, ModTime: mt},
		{Typeflag: tar.TypeLink, Name: "h", Linkname: "d/f.txt", ModTime: mt},
		{Typeflag: tar.TypeReg, Name: "../up.txt", Mode: 0o644, Size: 4, ModTime: mt},
		{Typeflag: tar.TypeFifo, Name: "fifo", Mode: 0o644, ModTime: mt},
		{Typeflag: tar.TypeReg, Name: "escape/x", Mode: 0o644, Size: 4, ModTime: mt},
	} {
		if err := tw.WriteHeader(h); err != nil {
			tb.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte("data"))
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func seedZip(tb testing.TB) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, name := range []string{"z/a.txt", "../zup.txt", "escape/z"} {
		w, err := zw.Create(name)
		if err != nil {
			tb.Fatal(err)
		}
		_, _ = w.Write([]byte("zip " + name))
	}
	h := &zip.FileHeader{Name: "zl"}
	h.SetMode(fs.ModeSymlink | 0o777)
	w, _ := zw.CreateHeader(h)
	_, _ = w.Write([]byte("/etc"))
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// seedRar is a RAR 5 archive, made by hand from the format's description:
// one file "r.txt" stored (no compression).
func seedRar() []byte {
	vint := func(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
	block := func(body []byte) []byte {
		h := vint(nil, uint64(len(body)))
		h = append(h, body...)
		return append(binary.LittleEndian.AppendUint32(nil, crc32.ChecksumIEEE(h)), h...)
	}
	data := []byte("stored in rar\n")
	out := []byte("Rar!\x1a\x07\x01\x00")
	out = append(out, block([]byte{1, 0, 0})...) // main header: type 1, no flags, no archive flags
	var fh []byte
	fh = vint(fh, 2)                 // type: file
	fh = vint(fh, 0x0002)            // header flags: a data area follows
	fh = vint(fh, uint64(len(data))) // data size
	fh = vint(fh, 0x0004)            // file flags: CRC32 present
	fh = vint(fh, uint64(len(data))) // unpacked size
	fh = vint(fh, 0o644)             // attributes
	fh = binary.LittleEndian.AppendUint32(fh, crc32.ChecksumIEEE(data))
	fh = vint(fh, 0) // compression: version 0, store
	fh = vint(fh, 1) // host OS: Unix
	fh = vint(fh, 5) // name length
	fh = append(fh, "r.txt"...)
	out = append(out, block(fh)...)
	out = append(out, data...)
	return append(out, block([]byte{5, 0, 0})...) // end of archive
}

// The seeds themselves decode: the fuzzer starts from inputs that reach
// each format's decoder, not from ones refused at the door.
func TestDecompressSeedsReachEveryDecoder(t *testing.T) {
	want := map[string]string{
		"good.7z": "seven/a.txt", "zip": "z/a.txt", "rar": "r.txt", "tar": "d/f.txt",
	}
	seeds := decompressSeeds(t)
	named := map[string]fuzzSeed{"good.7z": seeds[1], "zip": seeds[2], "rar": seeds[3], "tar": seeds[4]}
	for i, w := range []string{"gz", "bz2", "xz", "zst", "lz4"} {
		named["tar."+w] = seeds[5+2*i]
		want["tar."+w] = "d/f.txt"
		named[w] = seeds[6+2*i]
		want[w] = "a.out"
	}
	for name, s := range named {
		arc, err := wrapArchive(s.data, s.wrap)
		if err != nil {
			t.Fatal(err)
		}
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "a"), arc, 0o644); err != nil {
			t.Fatal(err)
		}
		fsys, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := New(fsys).Decompress(context.Background(), "/", "a"); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if _, err := os.Stat(filepath.Join(root, want[name])); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		fsys.Close()
	}
}

// decompressChecked extracts arc, through the isolated child, into a root
// next to a directory it must never touch, and checks FuzzDecompress's
// properties.
func decompressChecked(t *testing.T, arc []byte) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600))
	must(os.Symlink("../outside", filepath.Join(root, "escape")))
	must(os.WriteFile(filepath.Join(root, "a"), arc, 0o644))
	before := snapshot(t, base)
	fsys, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1, DiskLimit: 64 << 20})
	must(err)
	defer fsys.Close()
	m := New(fsys)
	m.Isolation = &Isolation{
		Command: []string{os.Args[0], WorkerCommand},
		Limits:  isolate.Limits{Memory: 256 << 20, CPU: 2 * time.Second, Wall: 4 * time.Second},
		UID:     -1, GID: -1,
	}
	_, err = m.Decompress(context.Background(), "/", "a")
	if err != nil {
		if _, ok := usererr.From(err); !ok {
			t.Fatalf("an internal error (a 500) for an archive: %v", err)
		}
		if d := diffSnapshots(before, snapshot(t, base)); d != "" {
			t.Fatalf("a failed extraction left changes:\n%s", d)
		}
		return
	}
	after := snapshot(t, base)
	for p, v := range before {
		if strings.HasPrefix(p, "outside") && after[p] != v {
			t.Fatalf("%s outside the root changed: %q, was %q", p, after[p], v)
		}
	}
	for p, v := range after {
		if strings.HasPrefix(p, "outside") && before[p] == "" {
			t.Fatalf("%s created outside the root: %s", p, v)
		}
	}
	secret, _ := os.Lstat(filepath.Join(outside, "secret"))
	secretIno := secret.Sys().(*syscall.Stat_t).Ino
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode()
		if mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			return fmt.Errorf("%s: special file %v", p, mode)
		}
		if mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			return fmt.Errorf("%s: mode %v", p, mode)
		}
		if mode.IsRegular() && fi.Sys().(*syscall.Stat_t).Ino == secretIno {
			return fmt.Errorf("%s is a hard link to the outside", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// snapshot describes every entry under base (type, mode, size, link target
// or content hash), to compare before and after.
func snapshot(t *testing.T, base string) map[string]string {
	out := map[string]string{}
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		v := fmt.Sprintf("%v %d", fi.Mode(), fi.Size())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			v += " -> " + target
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			v += fmt.Sprintf(" %08x", crc32.ChecksumIEEE(b))
		}
		out[rel] = v
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

func diffSnapshots(a, b map[string]string) string {
	var d []string
	for p, v := range a {
		if b[p] != v {
			d = append(d, fmt.Sprintf("%s: %q -> %q", p, v, b[p]))
		}
	}
	for p, v := range b {
		if _, ok := a[p]; !ok {
			d = append(d, fmt.Sprintf("%s: new %q", p, v))
		}
	}
	return strings.Join(d, "\n")
}
