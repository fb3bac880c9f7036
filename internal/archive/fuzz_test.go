package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The extraction fuzz targets check the safety property of Extract, whatever the archive holds
// (names, link targets, types, modes, sizes, truncated or malformed headers):
//   - it never panics and always returns;
//   - nothing outside the root is created, changed or removed, even through a link the root
//     already holds (escape -> the outside directory) or one the archive makes;
//   - no file in the root is a hard link to a file outside it;
//   - nothing in the root is a device, FIFO or socket, or carries setuid, setgid or sticky bits.

// fuzzWorld is a directory holding the server root and, beside it, a directory the extraction
// must never touch. The root starts with links out of it and an ordinary file.
type fuzzWorld struct {
	base, root, outside, tmp string
}

func newFuzzWorld(t *testing.T) *fuzzWorld {
	base := t.TempDir()
	w := &fuzzWorld{
		base: base, root: filepath.Join(base, "root"),
		outside: filepath.Join(base, "outside"), tmp: filepath.Join(base, "tmp"),
	}
	for _, d := range []string{w.root, w.outside, w.tmp, filepath.Join(w.outside, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(w.outside, "secret.txt"), []byte("secret"), 0o600))
	must(os.WriteFile(filepath.Join(w.outside, "sub", "deep.txt"), []byte("deep"), 0o644))
	must(os.Symlink(w.outside, filepath.Join(w.root, "escape")))
	must(os.Symlink("../outside/secret.txt", filepath.Join(w.root, "escape-file")))
	must(os.Symlink("/", filepath.Join(w.root, "slash")))
	must(os.WriteFile(filepath.Join(w.root, "server.properties"), []byte("a=1\n"), 0o644))
	return w
}

// outsideState describes everything under base except the root (the tmp spool is checked to
// be empty after Extract).
func (w *fuzzWorld) outsideState(t *testing.T) map[string]string {
	out := map[string]string{}
	err := filepath.WalkDir(w.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == w.root {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		rel, _ := filepath.Rel(w.base, p)
		out[rel] = fmt.Sprintf("%v %s size=%d nlink=%d", fi.Mode(), fi.ModTime().Format(time.RFC3339Nano), fi.Size(), st.Nlink)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// extractChecked extracts archive into a fresh world and checks the safety property.
func extractChecked(t *testing.T, archive []byte) {
	w := newFuzzWorld(t)
	before := w.outsideState(t)
	outsideInodes := map[uint64]string{}
	for _, n := range []string{"outside/secret.txt", "outside/sub/deep.txt"} {
		fi, err := os.Lstat(filepath.Join(w.base, n))
		if err != nil {
			t.Fatal(err)
		}
		outsideInodes[fi.Sys().(*syscall.Stat_t).Ino] = n
	}
	dst := newFS(t, w.root)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = Extract(ctx, bytes.NewReader(archive), dst.Trusted(), ExtractOptions{TempDir: w.tmp})

	if diff := cmp.Diff(before, w.outsideState(t)); diff != "" {
		t.Fatalf("the extraction changed something outside the root:\n%s", diff)
	}
	if entries, _ := os.ReadDir(w.tmp); len(entries) != 0 {
		t.Fatalf("the extraction left files in its temporary directory: %v", entries)
	}
	err := filepath.WalkDir(w.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode()
		if mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			t.Fatalf("%s: special file %v extracted", p, mode)
		}
		if mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			t.Fatalf("%s: mode %v keeps setuid, setgid or sticky", p, mode)
		}
		if mode.IsRegular() {
			if n, ok := outsideInodes[fi.Sys().(*syscall.Stat_t).Ino]; ok {
				t.Fatalf("%s is a hard link to %s, outside the root", p, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// seedArchives are tar streams (not compressed) of the known attacks and of ordinary content.
func seedArchives(t testing.TB) [][]byte {
	type ent struct {
		h    tar.Header
		body string
	}
	reg := func(name, body string) ent {
		return ent{tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}, body}
	}
	link := func(typ byte, name, target string) ent {
		return ent{tar.Header{Typeflag: typ, Name: name, Linkname: target, Mode: 0o777}, ""}
	}
	dir := func(name string, mode int64) ent {
		return ent{tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode}, ""}
	}
	sets := [][]ent{
		{dir("world/", 0o755), reg("world/level.dat", "level"), reg("server.properties", "a=2\n")},
		{reg("../escaped.txt", "x")},
		{reg("/etc/escaped.txt", "x")},
		{reg("escape/new.txt", "x")},
		{reg("escape-file", "overwrite")},
		{reg("slash/tmp/x", "x")},
		{link(tar.TypeSymlink, "l", "../outside"), reg("l/x", "x")},
		{link(tar.TypeSymlink, "l", "/"), dir("l/etc/", 0o755)},
		{link(tar.TypeLink, "h", "escape/secret.txt")},
		{link(tar.TypeLink, "h", "escape-file")},
		{link(tar.TypeLink, "h", "../outside/secret.txt")},
		{link(tar.TypeSymlink, "a", "b"), link(tar.TypeSymlink, "b", "a"), reg("a/x", "x")},
		{dir("d/", 0o7777), reg("d/f", "x"), {tar.Header{Typeflag: tar.TypeReg, Name: "suid", Mode: 0o4755}, ""}},
		{{tar.Header{Typeflag: tar.TypeChar, Name: "dev", Devmajor: 1, Devminor: 3, Mode: 0o666}, ""}, {tar.Header{Typeflag: tar.TypeFifo, Name: "fifo", Mode: 0o644}, ""}},
		{reg("escape", "replace the link"), reg("escape/x", "x")},
		{dir("escape/", 0o755), reg("escape/x", "x")},
		{reg(ManifestName, "not a manifest")},
	}
	var out [][]byte
	for _, s := range sets {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, e := range s {
			if err := tw.WriteHeader(&e.h); err != nil {
				t.Fatalf("seed %q: %v", e.h.Name, err)
			}
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		out = append(out, buf.Bytes())
	}
	return out
}

func gzipBytes(t *testing.T, raw []byte) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	if _, err := gz.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzExtractTar mutates whole tar streams (headers, PAX records, sizes, truncation): the
// harness compresses them, so that the fuzzer works on the tar layer.
func FuzzExtractTar(f *testing.F) {
	for _, s := range seedArchives(f) {
		f.Add(s)
	}
	for _, s := range sparseSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 1<<20 {
			return
		}
		extractChecked(t, gzipBytes(t, raw))
	})
}

// FuzzExtractEntries builds archives of up to three entries from fuzzed names, link targets,
// types and modes: the fuzzer reaches unusual paths directly, which a byte-level mutation of a
// tar header rarely produces with a valid checksum.
func FuzzExtractEntries(f *testing.F) {
	f.Add("escape/x", "", byte(tar.TypeReg), "l", "../outside", byte(tar.TypeSymlink), "l/y", "", byte(tar.TypeReg), int64(0o644), []byte("x"))
	f.Add("h", "escape/secret.txt", byte(tar.TypeLink), "d/", "", byte(tar.TypeDir), "d/../../z", "", byte(tar.TypeReg), int64(0o7755), []byte(""))
	f.Add("a", "b", byte(tar.TypeSymlink), "b", "a", byte(tar.TypeSymlink), "a/c", "", byte(tar.TypeReg), int64(0o755), []byte("c"))
	f.Add("world/", "", byte(tar.TypeDir), "world/x", "", byte(tar.TypeReg), "world", "/", byte(tar.TypeSymlink), int64(0o600), []byte("data"))
	f.Add("escape-file", "", byte(tar.TypeReg), "h2", "escape-file", byte(tar.TypeLink), "fifo", "", byte(tar.TypeFifo), int64(0o644), []byte("z"))
	f.Fuzz(func(t *testing.T, n1, l1 string, t1 byte, n2, l2 string, t2 byte, n3, l3 string, t3 byte, mode int64, body []byte) {
		if len(body) > 64<<10 {
			return
		}
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, e := range []struct {
			name, link string
			typ        byte
		}{{n1, l1, t1}, {n2, l2, t2}, {n3, l3, t3}} {
			h := &tar.Header{Typeflag: e.typ, Name: e.name, Linkname: e.link, Mode: mode, ModTime: time.Unix(1600000000, 0)}
			if e.typ == tar.TypeReg {
				h.Size = int64(len(body))
			}
			if tw.WriteHeader(h) != nil {
				break // a header tar cannot encode ends the archive there
			}
			if h.Size > 0 {
				if _, err := tw.Write(body); err != nil {
					t.Fatal(err)
				}
			}
		}
		_ = tw.Close()
		extractChecked(t, gzipBytes(t, buf.Bytes()))
	})
}
