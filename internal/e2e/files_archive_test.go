package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mholt/archives"
)

type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func makeTar(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Date(2021, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, ModTime: mt, Size: int64(len(e.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

func compressWith(t *testing.T, c archives.Compressor, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := c.OpenWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func makeZip(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		h := &zip.FileHeader{Name: n, Method: zip.Deflate, Modified: time.Date(2022, 1, 2, 3, 4, 6, 0, time.UTC)}
		h.SetMode(0o640)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(w, files[n])
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func (n *node) decompress(root, file string) (int, string) {
	n.t.Helper()
	res, body := n.files("POST", "decompress", map[string]string{"root": root, "file": file})
	return res.StatusCode, string(body)
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFilesDecompressFormats(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	tree := makeTar(t, []tarEntry{
		{name: "pkg/", typ: tar.TypeDir, mode: 0o750},
		{name: "pkg/a.txt", body: "alpha", mode: 0o4755},
		{name: "pkg/b/c.txt", body: "gamma", mode: 0o600},
		{name: "pkg/link", typ: tar.TypeSymlink, link: "a.txt"},
		{name: "pkg/hard", typ: tar.TypeLink, link: "pkg/a.txt"},
	})
	cases := map[string][]byte{
		"t.tar":     tree,
		"t.tar.gz":  gzipBytes(tree),
		"t.tar.bz2": compressWith(t, archives.Bz2{}, tree),
		"t.tar.xz":  compressWith(t, archives.Xz{}, tree),
		"t.tar.zst": compressWith(t, archives.Zstd{}, tree),
		"t.noext":   gzipBytes(tree), // found by content, not by name
	}
	for file, data := range cases {
		dir := "out-" + strings.ReplaceAll(file, ".", "-")
		mustWrite(t, n.fpath(dir+"/"+file), string(data), 0o644)
		if code, body := n.decompress("/"+dir, file); code != 204 {
			t.Fatalf("%s: %d %s", file, code, body)
		}
		base := n.fpath(dir + "/pkg")
		if readFile(t, base+"/a.txt") != "alpha" || readFile(t, base+"/b/c.txt") != "gamma" || readFile(t, base+"/hard") != "alpha" {
			t.Fatalf("%s: contents wrong", file)
		}
		fi, _ := os.Stat(base + "/a.txt")
		if fi.Mode() != 0o755 { // setuid dropped, bits kept
			t.Fatalf("%s: a.txt mode %v", file, fi.Mode())
		}
		if !fi.ModTime().Equal(time.Date(2021, 2, 3, 4, 5, 6, 0, time.UTC)) {
			t.Fatalf("%s: mtime %v", file, fi.ModTime())
		}
		if fi, _ := os.Stat(base + "/b/c.txt"); fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: c.txt mode %v", file, fi.Mode())
		}
		if target, err := os.Readlink(base + "/link"); err != nil || target != "a.txt" {
			t.Fatalf("%s: link %q %v", file, target, err)
		}
		if fi, _ := os.Stat(base); fi.Mode().Perm() != 0o750 {
			t.Fatalf("%s: dir mode %v", file, fi.Mode())
		}
	}

	// zip, by content, with modes and times.
	mustWrite(t, n.fpath("z/data.bin"), string(makeZip(t, map[string]string{"z1.txt": "one", "sub/z2.txt": "two"})), 0o644)
	if code, body := n.decompress("/z", "data.bin"); code != 204 {
		t.Fatalf("zip: %d %s", code, body)
	}
	if readFile(t, n.fpath("z/z1.txt")) != "one" || readFile(t, n.fpath("z/sub/z2.txt")) != "two" {
		t.Fatal("zip contents")
	}
	if fi, _ := os.Stat(n.fpath("z/z1.txt")); fi.Mode().Perm() != 0o640 || !fi.ModTime().Equal(time.Date(2022, 1, 2, 3, 4, 6, 0, time.UTC)) {
		t.Fatalf("zip file: %v %v", fi.Mode(), fi.ModTime())
	}

	// A single compressed file: x.gz → x.
	mustWrite(t, n.fpath("s/notes.txt.gz"), string(gzipBytes([]byte("single"))), 0o644)
	if code, body := n.decompress("/s", "notes.txt.gz"); code != 204 || readFile(t, n.fpath("s/notes.txt")) != "single" {
		t.Fatalf("single: %d %s", code, body)
	}

	// 7z, built with the 7z tool when it is installed.
	if _, err := exec.LookPath("7z"); err == nil {
		src := t.TempDir()
		mustWrite(t, filepath.Join(src, "seven/s.txt"), "seven", 0o644)
		cmd := exec.Command("7z", "a", "-bd", filepath.Join(src, "a.7z"), "seven")
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("7z: %v %s", err, out)
		}
		b, _ := os.ReadFile(filepath.Join(src, "a.7z"))
		mustWrite(t, n.fpath("sz/a.7z"), string(b), 0o644)
		if code, body := n.decompress("/sz", "a.7z"); code != 204 || readFile(t, n.fpath("sz/seven/s.txt")) != "seven" {
			t.Fatalf("7z: %d %s", code, body)
		}
	}

	// Errors.
	mustWrite(t, n.fpath("junk.zip"), "this is not an archive at all", 0o644)
	res, body := n.files("POST", "decompress", map[string]string{"root": "/", "file": "junk.zip"})
	wantError(t, "unknown format", res, body, 400, "The archive provided is in a format Wharf does not understand.")
	res, body = n.files("POST", "decompress", map[string]string{"root": "/", "file": "nope.zip"})
	wantStatus(t, "missing", res, body, 404)
	res, body = n.files("POST", "decompress", map[string]string{"root": "/", "file": "z"})
	wantStatus(t, "a directory", res, body, 400)
	mustWrite(t, n.fpath("trunc.tar.gz"), string(gzipBytes(tree)[:40]), 0o644)
	res, body = n.files("POST", "decompress", map[string]string{"root": "/", "file": "trunc.tar.gz"})
	wantStatus(t, "truncated", res, body, 400)
}

// Zip-slip, tar-slip, links out, hard links out, devices, FIFOs and
// denylisted names: skipped, nothing written outside the root.
func TestFilesDecompressAttacks(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	outside, check := attackSetup(t, n)
	up := "../" + siblingServer
	evilTar := makeTar(t, []tarEntry{
		{name: "../evil.txt", body: "x"},
		{name: "/abs.txt", body: "x"},
		{name: "ok/../../evil2.txt", body: "x"},
		{name: up + "/sibling.txt", body: "overwritten"},
		{name: "lnk", typ: tar.TypeSymlink, link: outside},
		{name: "lnk/through.txt", body: "x"},
		{name: "siblnk", typ: tar.TypeSymlink, link: up},
		{name: "siblnk/sibling.txt", body: "x"},
		{name: "hard-etc", typ: tar.TypeLink, link: "/etc/passwd"},
		{name: "hard-sib", typ: tar.TypeLink, link: up + "/sibling.txt"},
		{name: "hard-up", typ: tar.TypeLink, link: "../../etc/passwd"},
		{name: "dev", typ: tar.TypeChar},
		{name: "blk", typ: tar.TypeBlock},
		{name: "fifo", typ: tar.TypeFifo},
		{name: "x.secret", body: "denied"},
		{name: "locked/y.txt", body: "denied"},
		{name: "good.txt", body: "good"},
	})
	mustWrite(t, n.fpath("evil.tar.gz"), string(gzipBytes(evilTar)), 0o644)
	code, body := n.decompress("/", "evil.tar.gz")
	if code != 204 || readFile(t, n.fpath("good.txt")) != "good" {
		t.Fatalf("evil tar: %d %s", code, body)
	}
	// Entries through links planted in the tree (to the sibling, dangling
	// out): refused, and what the archive wrote before is removed.
	for _, through := range []string{"sib/through.txt", "dang/created.txt", "chain1/x.txt", "etc/x.txt"} {
		mustWrite(t, n.fpath("through.tar"), string(makeTar(t, []tarEntry{{name: "first.txt", body: "1"}, {name: through, body: "x"}})), 0o644)
		code, body := n.decompress("/", "through.tar")
		if code < 400 || code >= 500 {
			t.Fatalf("%s: %d %s", through, code, body)
		}
		if _, err := os.Stat(n.fpath("first.txt")); err == nil {
			t.Fatalf("%s: first.txt left after a refused extraction", through)
		}
	}
	for _, p := range []string{"x.secret", "locked/y.txt", "hard-etc", "hard-sib", "hard-up", "dev", "blk", "fifo"} {
		if _, err := os.Lstat(n.fpath(p)); err == nil {
			t.Errorf("%s was extracted", p)
		}
	}
	zipSlip := makeZip(t, map[string]string{"../zevil.txt": "x", "/zabs.txt": "x", "a/../../zevil2.txt": "x", up + "/sibling.txt": "x", "zgood.txt": "good"})
	mustWrite(t, n.fpath("slip.zip"), string(zipSlip), 0o644)
	if code, body := n.decompress("/", "slip.zip"); code != 204 || readFile(t, n.fpath("zgood.txt")) != "good" {
		t.Fatalf("zip slip: %d %s", code, body)
	}
	// Extracting into a root that is a link out, or with ".." in the fields.
	for _, c := range [][2]string{{"sib", "../slip.zip"}, {"etc", "../slip.zip"}, {up, "sibling.txt"}, {"/", up + "/sibling.txt"}} {
		res, body := n.files("POST", "decompress", map[string]string{"root": c[0], "file": c[1]})
		if res.StatusCode < 400 || res.StatusCode >= 500 {
			t.Errorf("decompress %v: %d %s", c, res.StatusCode, body)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(n.dataDir(filesServer)), "evil.txt")); err == nil {
		t.Fatal("evil.txt written next to the server directories")
	}
	check()
}

// A zip bomb and a tar.gz bomb against a 1 MiB limit: refused, and nothing
// of them is left.
func TestFilesDecompressBombs(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 1, nil)
	zeros := strings.Repeat("\x00", 8<<20)
	mustWrite(t, n.fpath("bomb.zip"), string(makeZip(t, map[string]string{"a/zero.bin": zeros})), 0o644)
	mustWrite(t, n.fpath("bomb.tar.gz"), string(gzipBytes(makeTar(t, []tarEntry{{name: "small.txt", body: "s"}, {name: "b/zero.bin", body: zeros}}))), 0o644)
	for _, f := range []string{"bomb.zip", "bomb.tar.gz"} {
		res, body := n.files("POST", "decompress", map[string]string{"root": "/", "file": f})
		wantError(t, f, res, body, 400, "There is not enough disk space available to perform that action.")
	}
	for _, p := range []string{"a", "b", "small.txt"} {
		if _, err := os.Lstat(n.fpath(p)); err == nil {
			t.Errorf("%s left behind", p)
		}
	}
}

var archiveName = regexp.MustCompile(`^archive-\d{4}-\d\d-\d\dT\d{6}(Z|[+-]\d{4})(-\d+)?\.tar\.gz$`)

func TestFilesCompress(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	mustWrite(t, n.fpath("a.txt"), "alpha", 0o600)
	mustWrite(t, n.fpath("d/x.txt"), "x", 0o644)
	mustWrite(t, n.fpath("other.txt"), "not selected", 0o644)
	mustWrite(t, n.fpath("d/keep.secret"), "secret", 0o644)
	_ = os.MkdirAll(n.fpath("d/empty"), 0o755)
	_ = os.Symlink("x.txt", n.fpath("d/link"))
	_ = os.Symlink("/etc", n.fpath("d/etc"))

	req := map[string]any{"root": "/", "files": []string{"a.txt", "d", "missing"}}
	var names []string
	for range 2 { // two archives in the same second are two files
		res, body := n.files("POST", "compress", req)
		wantStatus(t, "compress", res, body, 200)
		var st stat
		_ = json.Unmarshal(body, &st)
		if !archiveName.MatchString(st.Name) || st.Mime != "application/tar+gzip" || !st.File || st.Size == 0 || st.ModeBits != "644" {
			t.Fatalf("stat %+v", st)
		}
		names = append(names, st.Name)
	}
	if names[0] == names[1] {
		t.Fatalf("same archive name twice: %s", names[0])
	}
	for _, name := range names {
		got := tarList(t, n.fpath(name))
		want := "a.txt:-rw-------:alpha d/:d d/empty/:d d/etc:->/etc d/link:->x.txt d/x.txt:-rw-r--r--:x"
		if got != want {
			t.Fatalf("%s holds\n%s\nwant\n%s", name, got, want)
		}
	}

	// Every extension round-trips through decompress.
	for _, ext := range []string{"zip", "tar", "tgz", "tar.bz2", "tar.xz", "tar.zst"} {
		res, body := n.files("POST", "compress", map[string]any{"root": "/d", "files": []string{"x.txt", "link"}, "name": "pack", "extension": ext})
		wantStatus(t, ext, res, body, 200)
		var st stat
		_ = json.Unmarshal(body, &st)
		want := "pack." + map[string]string{"tgz": "tar.gz"}[ext]
		if want == "pack." {
			want = "pack." + ext
		}
		if st.Name != want {
			t.Fatalf("%s: name %s, want %s", ext, st.Name, want)
		}
		dir := "rt-" + strings.ReplaceAll(ext, ".", "-")
		_ = os.MkdirAll(n.fpath(dir), 0o755)
		_ = os.Rename(n.fpath("d/"+st.Name), n.fpath(dir+"/"+st.Name))
		if code, body := n.decompress("/"+dir, st.Name); code != 204 {
			t.Fatalf("%s: decompress %d %s", ext, code, body)
		}
		if readFile(t, n.fpath(dir+"/x.txt")) != "x" {
			t.Fatalf("%s: x.txt", ext)
		}
		if target, _ := os.Readlink(n.fpath(dir + "/link")); target != "x.txt" {
			t.Fatalf("%s: link %q", ext, target)
		}
	}

	res, body := n.files("POST", "compress", map[string]any{"root": "/", "files": []string{}})
	wantError(t, "none", res, body, 422, "No files were specified for compression.")
	res, body = n.files("POST", "compress", map[string]any{"root": "/", "files": []string{"a.txt"}, "extension": "rar"})
	wantStatus(t, "bad extension", res, body, 400)
	res, body = n.files("POST", "compress", map[string]any{"root": "/", "files": []string{"a.txt"}, "name": "../x"})
	wantStatus(t, "bad name", res, body, 400)
	res, body = n.files("POST", "compress", map[string]any{"root": "/nope", "files": []string{"a.txt"}})
	wantStatus(t, "missing root", res, body, 404)
	for _, root := range []string{"d/etc", "../" + siblingServer} {
		res, body = n.files("POST", "compress", map[string]any{"root": root, "files": []string{"."}})
		if res.StatusCode < 400 || res.StatusCode >= 500 {
			t.Fatalf("compress root %s: %d %s", root, res.StatusCode, body)
		}
	}
}

// tarList describes a tar.gz: "name:mode:content" for files, "name:d" for
// directories, "name:->target" for links.
func tarList(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			out = append(out, h.Name+":d")
		case tar.TypeSymlink:
			out = append(out, h.Name+":->"+h.Linkname)
		default:
			b, _ := io.ReadAll(tr)
			out = append(out, h.Name+":"+h.FileInfo().Mode().String()+":"+string(b))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// Compress against a 1 MiB limit: stopped when the archive would cross it
// (and removed), refused with 409 when the server is already full.
func TestFilesCompressDiskLimit(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 1, nil)
	rnd := make([]byte, 700<<10)
	_, _ = rand.Read(rnd)
	res, body := n.files("POST", "write?file=rnd.bin", rnd)
	wantStatus(t, "write", res, body, 204)
	res, body = n.files("POST", "compress", map[string]any{"root": "/", "files": []string{"rnd.bin"}})
	wantError(t, "too big", res, body, 400, "There is not enough disk space available to perform that action.")
	entries, _ := os.ReadDir(n.dataDir(filesServer))
	if len(entries) != 1 {
		t.Fatalf("partial archive left: %v", entries)
	}
	res, body = n.files("POST", "write?file=fill.bin", make([]byte, (1<<20)-len(rnd)))
	wantStatus(t, "fill", res, body, 204)
	res, body = n.files("POST", "compress", map[string]any{"root": "/", "files": []string{"fill.bin"}})
	wantError(t, "full", res, body, 409, "This server does not have enough available disk space to generate a compressed archive.")
}
