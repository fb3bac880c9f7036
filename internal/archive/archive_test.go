package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/testutil/tree"
)

var mtime = time.Date(2020, 5, 6, 7, 8, 9, 0, time.UTC)

func newFS(t *testing.T, root string) *sandbox.FS { return tree.Open(t, root) }

// buildTree makes a small server tree with every kind of entry.
func buildTree(t *testing.T, root string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "world", "region"), 0o750))
	must(os.MkdirAll(filepath.Join(root, "empty", "deeper"), 0o700))
	must(os.MkdirAll(filepath.Join(root, "logs"), 0o755))
	files := map[string]string{
		"server.properties":     "motd=hi\n",
		"world/level.dat":       strings.Repeat("level", 1000),
		"world/region/r.0.mca":  strings.Repeat("\x00\x01chunk", 5000),
		"logs/latest.log":       "log line\n",
		"run.sh":                "#!/bin/sh\n",
		"weird\nname\\x":        "escaped",
		"plugins.jar":           string(bytes.Repeat([]byte{0xde, 0xad}, 70000)),
		"world/region/empty.db": "",
	}
	for name, data := range files {
		must(os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755))
		must(os.WriteFile(filepath.Join(root, name), []byte(data), 0o644))
	}
	must(os.Chmod(filepath.Join(root, "run.sh"), 0o750))
	must(os.Symlink("/etc", filepath.Join(root, "etc-link")))
	must(os.Symlink("world/level.dat", filepath.Join(root, "level-link")))
	must(os.Symlink("../../outside", filepath.Join(root, "world", "out-link")))
	must(filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		return os.Chtimes(p, mtime, mtime)
	}))
	must(os.Chmod(filepath.Join(root, "world"), 0o750)) // mode only; mtime set above
}

// snapshot describes a tree (tree.Snapshot) or fails the test.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out, err := tree.Snapshot(root)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeArchive(t *testing.T, src *sandbox.FS, opts WriteOptions) ([]byte, Result) {
	t.Helper()
	var buf bytes.Buffer
	res, err := Write(context.Background(), &buf, src, opts)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), res
}

func entries(t *testing.T, data []byte) map[string]*tar.Header {
	return tree.Headers(t, bytes.NewReader(data))
}

func TestWriteExtractRoundTrip(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	buildTree(t, src)
	var last Progress
	data, res := writeArchive(t, newFS(t, src), WriteOptions{Level: LevelBestSpeed, Manifest: true, Hash: sha1.New, Progress: func(p Progress) { last = p }})
	sum := sha1.Sum(data)
	if res.Sum != hex.EncodeToString(sum[:]) || res.Size != int64(len(data)) {
		t.Fatalf("result %+v does not describe the %d bytes written", res, len(data))
	}
	if last.Output != res.Size || last.Input != res.Input || res.Files != 8 || res.Symlinks != 3 {
		t.Fatalf("progress %+v result %+v", last, res)
	}
	hs := entries(t, data)
	if h := hs["etc-link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/etc" {
		t.Fatalf("symlink to /etc not stored as a link: %+v", h)
	}
	if h := hs["empty/deeper/"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o700 {
		t.Fatalf("empty directory not kept: %+v", h)
	}
	for name := range hs {
		if strings.Contains(name, "passwd") {
			t.Fatalf("the /etc link was followed: %s", name)
		}
	}

	dst := filepath.Join(base, "dst")
	var seen []string
	xr, err := Extract(context.Background(), bytes.NewReader(data), newFS(t, dst), ExtractOptions{OnEntry: func(n string) { seen = append(seen, n) }})
	if err != nil {
		t.Fatal(err)
	}
	if !xr.Verified || xr.Files != 8 {
		t.Fatalf("extract result %+v", xr)
	}
	if diff := cmp.Diff(snapshot(t, src), snapshot(t, dst)); diff != "" {
		t.Fatalf("restored tree differs (-want +got):\n%s", diff)
	}
	if _, err := os.Lstat(filepath.Join(dst, ManifestName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the integrity entry was written to the server directory")
	}
	if len(seen) != int(xr.Files+xr.Dirs+xr.Symlinks) {
		t.Fatalf("OnEntry saw %d entries: %v", len(seen), seen)
	}
}

func TestWriteIgnore(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	buildTree(t, src)
	data, res := writeArchive(t, newFS(t, src), WriteOptions{Ignore: "logs/\n*.jar\n# comment\n\n/world/region/*.mca\n!nothing"})
	if res.Sum != "" {
		t.Errorf("no Hash asked, but Sum is %q", res.Sum)
	}
	var names []string
	for n := range entries(t, data) {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.HasPrefix(n, "logs") || strings.HasSuffix(n, ".jar") || strings.HasSuffix(n, ".mca") {
			t.Fatalf("ignored entry archived: %s (all: %v)", n, names)
		}
	}
	if !strings.Contains(strings.Join(names, ","), "world/region/empty.db") {
		t.Fatalf("a kept file is missing: %v", names)
	}
}

func TestExtractOverwritesAndReplaces(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	buildTree(t, src)
	data, _ := writeArchive(t, newFS(t, src), WriteOptions{Manifest: true})
	dst := filepath.Join(base, "dst")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Things in the way: a longer file, a directory where a file goes, a
	// link where a file goes, a file where a directory goes, an extra file.
	must(os.MkdirAll(filepath.Join(dst, "run.sh", "x"), 0o755))
	must(os.WriteFile(filepath.Join(dst, "server.properties"), bytes.Repeat([]byte("x"), 10000), 0o600))
	must(os.Symlink("/etc/passwd", filepath.Join(dst, "logs-tmp")))
	must(os.WriteFile(filepath.Join(dst, "world"), []byte("not a dir"), 0o644))
	must(os.Symlink(filepath.Join(base, "outside-target"), filepath.Join(dst, "plugins.jar")))
	must(os.WriteFile(filepath.Join(dst, "extra.txt"), []byte("kept"), 0o644))
	if _, err := Extract(context.Background(), bytes.NewReader(data), newFS(t, dst), ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	got := snapshot(t, dst)
	if got["extra.txt"] == "" {
		t.Fatal("a file not in the archive was removed")
	}
	delete(got, "extra.txt")
	delete(got, "logs-tmp")
	if diff := cmp.Diff(snapshot(t, src), got); diff != "" {
		t.Fatalf("restored tree differs (-want +got):\n%s", diff)
	}
	if _, err := os.Lstat(filepath.Join(base, "outside-target")); err == nil {
		t.Fatal("a file was written through a link")
	}
}

// tarGz builds an archive from raw headers.
func tarGz(t testing.TB, entries ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for i := 0; i < len(entries); i += 2 {
		h := entries[i].(*tar.Header)
		body := entries[i+1].(string)
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, body); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

func reg(name string) *tar.Header { return &tar.Header{Typeflag: tar.TypeReg, Name: name} }

func TestExtractMaliciousArchives(t *testing.T) {
	cases := map[string][]any{
		"dotdot":               {reg("../escaped.txt"), "pwned"},
		"dotdot-deep":          {reg("a/../../escaped.txt"), "pwned"},
		"absolute":             {reg("/tmp/escaped.txt"), "pwned"},
		"symlink-then-write":   {&tar.Header{Typeflag: tar.TypeSymlink, Name: "lnk", Linkname: "../outside"}, "", reg("lnk/escaped.txt"), "pwned"},
		"abs-symlink-write":    {&tar.Header{Typeflag: tar.TypeSymlink, Name: "lnk", Linkname: "/"}, "", reg("lnk/escaped.txt"), "pwned"},
		"hardlink-out":         {&tar.Header{Typeflag: tar.TypeLink, Name: "hl", Linkname: "../outside/secret.txt"}, ""},
		"hardlink-abs":         {&tar.Header{Typeflag: tar.TypeLink, Name: "hl", Linkname: "/etc/passwd"}, ""},
		"hardlink-via-symlink": {&tar.Header{Typeflag: tar.TypeSymlink, Name: "lnk", Linkname: "../outside"}, "", &tar.Header{Typeflag: tar.TypeLink, Name: "hl", Linkname: "lnk/secret.txt"}, ""},
	}
	for name, ents := range cases {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			os.MkdirAll(outside, 0o755)
			os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("secret"), 0o600)
			before := snapshot(t, base)
			dst := filepath.Join(base, "srv", "root")
			_, err := Extract(context.Background(), bytes.NewReader(tarGz(t, ents...)), newFS(t, dst), ExtractOptions{})
			if !errors.Is(err, ErrUnsafeEntry) {
				t.Fatalf("err = %v, want ErrUnsafeEntry", err)
			}
			after := snapshot(t, base)
			for k := range after {
				if strings.HasPrefix(k, "srv") {
					delete(after, k)
				}
			}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Fatalf("something changed outside the root:\n%s", diff)
			}
			if b, _ := os.ReadFile(filepath.Join(dst, "hl")); string(b) == "secret" {
				t.Fatal("hard link reached a file outside")
			}
		})
	}
}

func TestExtractSkipsDevicesAndSetuid(t *testing.T) {
	dst := t.TempDir()
	data := tarGz(t,
		&tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}, "",
		&tar.Header{Typeflag: tar.TypeFifo, Name: "fifo"}, "",
		&tar.Header{Typeflag: tar.TypeReg, Name: "suid", Mode: 0o4755}, "x",
	)
	res, err := Extract(context.Background(), bytes.NewReader(data), newFS(t, dst), ExtractOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != 2 || res.Verified {
		t.Fatalf("result %+v", res)
	}
	for _, n := range []string{"null", "fifo"} {
		if _, err := os.Lstat(filepath.Join(dst, n)); err == nil {
			t.Fatalf("%s was created", n)
		}
	}
	fi, _ := os.Stat(filepath.Join(dst, "suid"))
	if fi.Mode() != 0o755 {
		t.Fatalf("mode %v, want -rwxr-xr-x without setuid", fi.Mode())
	}
}

func TestExtractChecksumMismatch(t *testing.T) {
	data := tarGz(t, reg("a.txt"), "hello", reg(ManifestName), manifestLine(make([]byte, 20), "a.txt"))
	_, err := Extract(context.Background(), bytes.NewReader(data), newFS(t, t.TempDir()), ExtractOptions{})
	if !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("err = %v, want ErrChecksumMismatch", err)
	}
	// Without the integrity entry (an archive from another agent) it restores.
	data = tarGz(t, reg("a.txt"), "hello")
	res, err := Extract(context.Background(), bytes.NewReader(data), newFS(t, t.TempDir()), ExtractOptions{})
	if err != nil || res.Verified || res.Files != 1 {
		t.Fatalf("plain archive: %+v %v", res, err)
	}
}

func TestExtractCorruptAndTruncated(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	buildTree(t, src)
	data, _ := writeArchive(t, newFS(t, src), WriteOptions{Level: LevelNone, Manifest: true})
	for name, bad := range map[string][]byte{
		"truncated":  data[:len(data)/2],
		"no-trailer": data[:len(data)-4],
		"garbage":    []byte("this is not gzip at all"),
		"flipped":    append(append(append([]byte{}, data[:len(data)/2]...), data[len(data)/2]^0xff), data[len(data)/2+1:]...),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Extract(context.Background(), bytes.NewReader(bad), newFS(t, t.TempDir()), ExtractOptions{})
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrChecksumMismatch) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestExtractReadyGate(t *testing.T) {
	called := false
	_, err := Extract(context.Background(), strings.NewReader("not gzip"), newFS(t, t.TempDir()), ExtractOptions{Ready: func() error { called = true; return nil }})
	if err == nil || called {
		t.Fatalf("Ready called for an unreadable archive (err %v)", err)
	}
	stop := errors.New("stop")
	_, err = Extract(context.Background(), bytes.NewReader(tarGz(t, reg("a"), "x")), newFS(t, t.TempDir()), ExtractOptions{Ready: func() error { return stop }})
	if !errors.Is(err, stop) {
		t.Fatalf("err = %v", err)
	}
}

func TestExtractWriteLimit(t *testing.T) {
	data := tarGz(t, reg("big"), strings.Repeat("z", 3<<20))
	start := time.Now()
	_, err := Extract(context.Background(), bytes.NewReader(data), newFS(t, t.TempDir()), ExtractOptions{WriteLimit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// 3 MiB at 1 MiB/s with a one-second burst: about 2 s.
	if d := time.Since(start); d < 1500*time.Millisecond || d > 6*time.Second {
		t.Fatalf("took %s", d)
	}
}

// brokenWriter accepts limit bytes, then fails every write.
type brokenWriter struct{ limit int }

var errBroken = errors.New("connection reset")

func (w *brokenWriter) Write(p []byte) (int, error) {
	if len(p) > w.limit {
		n := w.limit
		w.limit = 0
		return n, errBroken
	}
	w.limit -= len(p)
	return len(p), nil
}

// An output that fails mid-stream (the peer of a transfer went away) ends Write with that error
// and leaves none of the compressor's goroutines behind (pgzip's writer keeps one blocked for
// ever when it sees the error itself).
func TestWriteFailingOutputLeavesNoGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t)
	src := t.TempDir()
	if err := tree.Build(src, 8<<20); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{0, 5, 300 << 10} {
		_, err := Write(context.Background(), &brokenWriter{limit: limit}, newFS(t, src), WriteOptions{Level: LevelBestSpeed})
		if !errors.Is(err, errBroken) {
			t.Fatalf("limit %d: Write = %v, want the output's error", limit, err)
		}
	}
}

// A link listed by the walk that is a directory (or a file) again when
// its target is read is an entry that vanished, not a failed backup
// (issue 33: 20-81 of ~100 backups failed with "readlink <dir>: invalid
// operation on this path" while a game swapped directories for links).
func TestWriteLeavesOutALinkSwappedForADirectory(t *testing.T) {
	for _, swapIn := range []string{"dir", "file"} {
		t.Run(swapIn, func(t *testing.T) {
			root := t.TempDir()
			if err := os.WriteFile(filepath.Join(root, "a.txt"), []byte("a"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("a.txt", filepath.Join(root, "link")); err != nil {
				t.Fatal(err)
			}
			swapped := false
			data, _ := writeArchive(t, newFS(t, root), WriteOptions{
				// Skip runs for the entry just before it is written: the
				// game swaps the link for a directory (a file) there.
				Skip: func(rel string, d fs.DirEntry) bool {
					if rel != "link" || d.Type()&fs.ModeSymlink == 0 {
						return false
					}
					p := filepath.Join(root, "link")
					if err := os.Remove(p); err != nil {
						t.Fatal(err)
					}
					var err error
					if swapIn == "dir" {
						err = os.Mkdir(p, 0o755)
					} else {
						err = os.WriteFile(p, nil, 0o644)
					}
					if err != nil {
						t.Fatal(err)
					}
					swapped = true
					return false
				},
			})
			if !swapped {
				t.Fatal("control: the link was never swapped")
			}
			got := entries(t, data)
			if _, ok := got["a.txt"]; !ok {
				t.Fatalf("a.txt missing: %v", got)
			}
			if h, ok := got["link"]; ok {
				t.Fatalf("the swapped link was archived: %+v", h)
			}
		})
	}
}

// recordHook is a FileHook that reuses nothing and records its calls.
type recordHook struct{ calls []string }

func (h *recordHook) Reuse(rel string, _ fs.FileInfo) ([]byte, bool) {
	h.calls = append(h.calls, "reuse "+rel)
	return nil, false
}
func (h *recordHook) Begin(rel string) error { h.calls = append(h.calls, "begin "+rel); return nil }
func (h *recordHook) End(rel string, _ fs.FileInfo, _ []byte) error {
	h.calls = append(h.calls, "end "+rel)
	return nil
}

// With a FileHook, an empty file is its header alone, from the walk's
// lstat (mode and time kept), without the hook (issue 33 item 4); the
// integrity entry still lists it.
func TestWriteHookedEmptyFileIsItsHeader(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "full.txt"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(root, "empty.cfg")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(empty, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	hook := &recordHook{}
	data, res := writeArchive(t, newFS(t, root), WriteOptions{Files: hook, Manifest: true})
	if want := []string{"reuse full.txt", "begin full.txt", "end full.txt"}; !slices.Equal(hook.calls, want) {
		t.Fatalf("hook calls %v, want %v", hook.calls, want)
	}
	if res.Files != 2 {
		t.Fatalf("%d files written, want 2", res.Files)
	}
	h := entries(t, data)["empty.cfg"]
	if h == nil || h.Typeflag != tar.TypeReg || h.Size != 0 || h.Mode != 0o600 || !h.ModTime.Equal(mtime) {
		t.Fatalf("empty.cfg entry %+v", h)
	}
	out := t.TempDir()
	r, err := Extract(context.Background(), bytes.NewReader(data), newFS(t, out), ExtractOptions{})
	if err != nil || !r.Verified {
		t.Fatalf("extract: %v, verified %v", err, r.Verified)
	}
	if fi, err := os.Stat(filepath.Join(out, "empty.cfg")); err != nil || fi.Size() != 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("restored empty.cfg: %v %v", fi, err)
	}
}
