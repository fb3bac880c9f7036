package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// withUmask runs the test under umask mask (the process's, restored after).
func withUmask(t *testing.T, mask int) {
	t.Helper()
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

func mustOpenDir(t testing.TB, f *FS, name string) *Dir {
	t.Helper()
	d, err := f.OpenDir(name)
	if err != nil {
		t.Fatalf("OpenDir(%q): %v", name, err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// TestDirCreateModesContentAndUsage: Create gives the asked mode whatever
// the umask (0644 for 0), the configured owner, writes are counted, and a
// second Create of the same name is fs.ErrExist.
func TestDirCreateModesContentAndUsage(t *testing.T) {
	withUmask(t, 0o022)
	fx := newFixture(t, Options{UID: 1234, GID: 5678})
	before, _ := fx.fs.RefreshUsage(context.Background())
	if err := fx.fs.MkdirAll("a/b", 0); err != nil {
		t.Fatal(err)
	}
	d := mustOpenDir(t, fx.fs, "/a/b/")
	if d.Name() != "/a/b" {
		t.Errorf("Name() = %q", d.Name())
	}
	want := map[string]fs.FileMode{"rw.txt": 0o666, "private.txt": 0o600, "default.txt": 0o644}
	perms := map[string]fs.FileMode{"rw.txt": 0o666, "private.txt": 0o600, "default.txt": 0}
	total := int64(2 * blockSize) // a and a/b
	for name, perm := range perms {
		w, err := d.Create(name, perm)
		if err != nil {
			t.Fatalf("Create(%s): %v", name, err)
		}
		if w.Name() != "/a/b/"+name {
			t.Errorf("File.Name() = %q", w.Name())
		}
		if w.OSFile() != nil {
			t.Error("a file open for writing exposes its *os.File")
		}
		content := "content of " + name
		if _, err := io.WriteString(w, content); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		total += blockSize
		p := filepath.Join(fx.root, "a", "b", name)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want[name] {
			t.Errorf("%s mode %v, want %v", name, fi.Mode(), want[name])
		}
		if uid, gid := owner(fi); os.Geteuid() == 0 && (uid != 1234 || gid != 5678) {
			t.Errorf("%s owner %d:%d", name, uid, gid)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != content {
			t.Errorf("%s content %q %v", name, b, err)
		}
	}
	if u := fx.fs.Usage(); u != before+total || u != diskBytes(t, fx.root) {
		t.Errorf("usage %d, want %d", u, before+total)
	}
	_, err := d.Create("rw.txt", 0)
	if !errors.Is(err, fs.ErrExist) || !errors.Is(err, ErrExist) {
		t.Fatalf("second Create = %v, want ErrExist", err)
	}
	if err.Error() != "open /a/b/rw.txt: file already exists" {
		t.Errorf("error text %q", err)
	}
	if b, _ := os.ReadFile(filepath.Join(fx.root, "a/b/rw.txt")); string(b) != "content of rw.txt" {
		t.Errorf("second Create changed the file: %q", b)
	}
	// Open reads it back through the same descriptor.
	r, err := d.Open("rw.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if b, err := io.ReadAll(r); err != nil || string(b) != "content of rw.txt" {
		t.Errorf("Open read %q %v", b, err)
	}
	if _, err := d.Open("missing"); !errors.Is(err, fs.ErrNotExist) || err.Error() != "open /a/b/missing: file does not exist" {
		t.Errorf("Open(missing) = %v", err)
	}
}

// TestDirCreateDiskLimit: a File from Dir.Create enforces the limit on
// every write like OpenFile's, and -1 refuses creation.
func TestDirCreateDiskLimit(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1})
	f := fx.fs
	base, _ := f.RefreshUsage(context.Background())
	f.SetDiskLimit(base + 100*1024)
	d := mustOpenDir(t, f, "inside")
	w, err := d.Create("a.bin", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 60*1024)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 60*1024)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("second write = %v, want ErrNoSpace", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if u := f.Usage(); u != base+60*1024 {
		t.Fatalf("usage %d, want %d", u, base+60*1024)
	}
	if fi, err := os.Stat(filepath.Join(fx.root, "inside/a.bin")); err != nil || fi.Size() != 60*1024 {
		t.Fatalf("file on disk: %v %v", fi, err)
	}
	f.SetDiskLimit(-1)
	if _, err := d.Create("b.bin", 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Create with limit -1 = %v, want ErrNoSpace", err)
	}
	if _, err := os.Lstat(filepath.Join(fx.root, "inside/b.bin")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Create with limit -1 left a file: %v", err)
	}
}

// TestDirNeverFollowsEntryLinks: Create and Open refuse a symbolic link at
// the entry (leading in or out of the root) and create nothing anywhere;
// Lchtimes changes the link itself, to the nanosecond.
func TestDirNeverFollowsEntryLinks(t *testing.T) {
	fx := newFixture(t)
	before := fx.snapshot(t)
	root := mustOpenDir(t, fx.fs, ".")
	inside := mustOpenDir(t, fx.fs, "inside")
	cases := []struct {
		d    *Dir
		base string
	}{
		{root, "dangling"}, {root, "reldangling"}, {root, "chain1"}, {root, "filelink"}, {root, "relfilelink"},
		{root, "dirlink"}, {root, "goodlink"}, {root, "goodfilelink"}, {root, "selfloop"},
		{inside, "shared"}, {inside, "escape"},
	}
	for _, c := range cases {
		if w, err := c.d.Create(c.base, 0); err == nil {
			_ = w.Close()
			t.Errorf("Create(%s) through a link succeeded", c.base)
		} else if !errors.Is(err, fs.ErrExist) {
			t.Errorf("Create(%s) = %v, want ErrExist", c.base, err)
		}
		if r, err := c.d.Open(c.base); err == nil {
			_ = r.Close()
			t.Errorf("Open(%s) followed the link", c.base)
		} else if strings.Contains(err.Error(), fx.base) {
			t.Errorf("error names a host path: %v", err)
		}
	}
	fx.assertOutsideUnchanged(t, before)
	if _, err := os.Lstat(filepath.Join(fx.root, "inside", "file.txt")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(fx.root, "inside", "file.txt")); string(b) != "inside data" {
		t.Fatalf("in-root target changed: %q", b)
	}

	// Lchtimes on a link: the link's times change, not its target's.
	mtime := time.Date(2020, 2, 3, 4, 5, 6, 123456789, time.UTC)
	atime := mtime.Add(time.Hour)
	for _, base := range []string{"filelink", "goodfilelink"} {
		if err := root.Lchtimes(base, atime, mtime); err != nil {
			t.Fatalf("Lchtimes(%s): %v", base, err)
		}
		fi, err := os.Lstat(filepath.Join(fx.root, base))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(mtime) {
			t.Errorf("%s link mtime %v, want %v", base, fi.ModTime(), mtime)
		}
	}
	if fi, _ := os.Stat(filepath.Join(fx.root, "inside", "file.txt")); fi.ModTime().Equal(mtime) {
		t.Error("Lchtimes changed the in-root target of goodfilelink")
	}
	fx.assertOutsideUnchanged(t, before)
	// And on a regular file, to the nanosecond.
	if err := root.Lchtimes("top.txt", atime, mtime); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(filepath.Join(fx.root, "top.txt")); !fi.ModTime().Equal(mtime) {
		t.Errorf("top.txt mtime %v, want %v", fi.ModTime(), mtime)
	}
	if err := root.Lchtimes("missing", atime, mtime); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Lchtimes(missing) = %v", err)
	}
}

// TestOpenDirRefusesLinksAndBadNames: the last component of OpenDir is
// never a followed link (in or out of the root); names above the root, a
// file and a missing name are errors; in-root links before it still work.
func TestOpenDirRefusesLinksAndBadNames(t *testing.T) {
	fx := newFixture(t)
	before := fx.snapshot(t)
	for _, name := range []string{"dirlink", "reldirlink", "goodlink", "inside/escape", "inside/nested/up", "selfloop", "dangling"} {
		d, err := fx.fs.OpenDir(name)
		if err == nil {
			_ = d.Close()
			t.Errorf("OpenDir(%q) followed a link", name)
			continue
		}
		if !errors.Is(err, ErrNotDir) {
			t.Errorf("OpenDir(%q) = %v, want ErrNotDir", name, err)
		}
	}
	bad := map[string]error{"../x": ErrOutsideRoot, "/../x": ErrOutsideRoot, "a/../../x": ErrOutsideRoot,
		"x\x00y": ErrOutsideRoot, "top.txt": ErrNotDir, "inside/file.txt": ErrNotDir, "missing": ErrNotExist,
		"missing/x": ErrNotExist, "dirlink/sub": ErrOutsideRoot}
	for name, want := range bad {
		d, err := fx.fs.OpenDir(name)
		if err == nil {
			_ = d.Close()
			t.Errorf("OpenDir(%q) succeeded", name)
			continue
		}
		if !errors.Is(err, want) {
			t.Errorf("OpenDir(%q) = %v, want %v", name, err, want)
		}
		if strings.Contains(err.Error(), fx.base) {
			t.Errorf("OpenDir(%q) error names a host path: %v", name, err)
		}
	}
	if err := fx.fs.MkdirAll("a/b", 0); err != nil {
		t.Fatal(err)
	}
	for name, host := range map[string]string{"a/b": "a/b", "/a/./b/": "a/b", "goodlink/nested": "inside/nested", "": ".", "/": "."} {
		d, err := fx.fs.OpenDir(name)
		if err != nil {
			t.Errorf("OpenDir(%q): %v", name, err)
			continue
		}
		w, err := d.Create("made", 0)
		if err != nil {
			t.Fatalf("Create in %q: %v", name, err)
		}
		_ = w.Close()
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(fx.root, host, "made")
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("OpenDir(%q).Create: %v", name, err)
		}
		_ = os.Remove(p)
	}
	fx.assertOutsideUnchanged(t, before)
}

// TestDirRefusesBadBases: a base that is not exactly one component is
// ErrOutsideRoot for every method, and nothing is created or changed.
func TestDirRefusesBadBases(t *testing.T) {
	fx := newFixture(t)
	before := fx.snapshot(t)
	d := mustOpenDir(t, fx.fs, "inside/nested")
	for _, base := range []string{"", ".", "..", "a/b", "../x", "/x", "x/", "../../../outside/secret.txt", "x\x00y"} {
		_, cerr := d.Create(base, 0)
		_, oerr := d.Open(base)
		lerr := d.Lchtimes(base, oldTime, oldTime)
		for what, err := range map[string]error{"Create": cerr, "Open": oerr, "Lchtimes": lerr} {
			if !errors.Is(err, ErrOutsideRoot) {
				t.Errorf("%s(%q) = %v, want ErrOutsideRoot", what, base, err)
				continue
			}
			if msg := err.Error(); strings.Contains(msg, fx.base) || strings.IndexByte(msg, 0) >= 0 || !strings.Contains(msg, "/inside/nested/") {
				t.Errorf("%s(%q) error text %q", what, base, msg)
			}
		}
	}
	if es, err := os.ReadDir(filepath.Join(fx.root, "inside", "nested")); err != nil || len(es) != 1 {
		t.Errorf("nested holds %v (%v), want only the link up", es, err)
	}
	if fi, _ := os.Stat(filepath.Join(fx.root, "inside")); fi.ModTime().Equal(oldTime) {
		t.Error("Lchtimes(\"..\") changed the parent")
	}
	fx.assertOutsideUnchanged(t, before)
}

// TestDirDenylist: an untrusted FS refuses denied entries (by the name
// given and by the directory's real name behind an in-root link), the
// trusted view allows them.
func TestDirDenylist(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1, Denylist: []string{"secret.cfg", "/config/*.yml", "*.jar", "logs/"}})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(fx.root, "config"), 0o755))
	must(os.MkdirAll(filepath.Join(fx.root, "logs"), 0o755))
	must(os.WriteFile(filepath.Join(fx.root, "config", "a.yml"), []byte("data"), 0o644))
	must(os.WriteFile(filepath.Join(fx.root, "secret.cfg"), []byte("data"), 0o644))
	must(os.Symlink(".", filepath.Join(fx.root, "here"))) // here/config is config

	type op struct {
		dir, base string
	}
	denied := []op{{".", "secret.cfg"}, {".", "new.jar"}, {"config", "a.yml"}, {"config", "b.yml"},
		{"here/config", "a.yml"}, {"here/config", "new.yml"}, {"logs", "latest.log"}, {"inside", "secret.cfg"}}
	for _, c := range denied {
		d := mustOpenDir(t, fx.fs, c.dir)
		_, cerr := d.Create(c.base, 0)
		_, oerr := d.Open(c.base)
		lerr := d.Lchtimes(c.base, oldTime, oldTime)
		for what, err := range map[string]error{"Create": cerr, "Open": oerr, "Lchtimes": lerr} {
			if !errors.Is(err, ErrDenied) || !errors.Is(err, fs.ErrPermission) {
				t.Errorf("%s(%s, %s) = %v, want ErrDenied", what, c.dir, c.base, err)
			}
		}
	}
	for _, n := range []string{"config/b.yml", "new.jar", "logs/latest.log", "inside/secret.cfg"} {
		if _, err := os.Lstat(filepath.Join(fx.root, n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("denied %s was created", n)
		}
	}
	// Allowed names next to them work.
	d := mustOpenDir(t, fx.fs, "here/config")
	w, err := d.Create("ok.txt", 0)
	must(err)
	must(w.Close())
	// The trusted view skips the denylist.
	tr := mustOpenDir(t, fx.fs.Trusted(), "here/config")
	w, err = tr.Create("b.yml", 0)
	must(err)
	must(w.Close())
	r, err := tr.Open("a.yml")
	must(err)
	if b, _ := io.ReadAll(r); string(b) != "data" {
		t.Errorf("trusted read %q", b)
	}
	must(r.Close())
	must(tr.Lchtimes("a.yml", oldTime, oldTime))
	if _, err := os.Lstat(filepath.Join(fx.root, "config", "b.yml")); err != nil {
		t.Errorf("trusted Create: %v", err)
	}
	// A denylist set after OpenDir applies at once.
	fx.fs.SetDenylist([]string{"late.txt"})
	if _, err := mustOpenDir(t, fx.fs, "inside").Create("late.txt", 0); !errors.Is(err, ErrDenied) {
		t.Errorf("Create after SetDenylist = %v", err)
	}
}

// TestDirFollowsRenamedDirectory: the handle follows the directory's
// inode. After the directory is moved elsewhere in the root and a link
// leading out is put at its old name, Create lands in the moved directory
// and nothing outside the root changes.
func TestDirFollowsRenamedDirectory(t *testing.T) {
	fx := newFixture(t)
	before := fx.snapshot(t)
	if err := fx.fs.MkdirAll("a/b", 0); err != nil {
		t.Fatal(err)
	}
	d := mustOpenDir(t, fx.fs, "a/b")
	if err := fx.fs.Rename("a", "moved/a"); err != nil {
		t.Fatal(err)
	}
	if err := fx.fs.Symlink(fx.outside, "a"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fx.outside, filepath.Join(fx.root, "moved", "a", "c")); err != nil {
		t.Fatal(err)
	}
	w, err := d.Create("x", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("hello"); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if err := d.Lchtimes("x", oldTime, oldTime); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(fx.root, "moved", "a", "b", "x")); err != nil || string(b) != "hello" {
		t.Fatalf("file in the moved directory: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(fx.outside, "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("created outside the root")
	}
	fx.assertOutsideUnchanged(t, before)
}

// TestDirConcurrentAndClose: one Dir serves several goroutines at once;
// after Close every method fails with ErrClosed.
func TestDirConcurrentAndClose(t *testing.T) {
	fx := newFixture(t)
	d, err := fx.fs.OpenDir("inside")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*50)
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				name := fmt.Sprintf("g%d-%d", g, i)
				w, err := d.Create(name, 0)
				if err != nil {
					errs <- err
					return
				}
				_, err = w.Write([]byte(name))
				errs <- errors.Join(err, w.Close(), d.Lchtimes(name, oldTime, oldTime))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if es, _ := os.ReadDir(filepath.Join(fx.root, "inside")); len(es) != 4+200 { // file.txt, nested, shared, escape
		t.Fatalf("%d entries, want 204", len(es))
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	_, cerr := d.Create("late", 0)
	_, oerr := d.Open("file.txt")
	lerr := d.Lchtimes("file.txt", oldTime, oldTime)
	for what, err := range map[string]error{"Create": cerr, "Open": oerr, "Lchtimes": lerr} {
		if !errors.Is(err, ErrClosed) || !errors.Is(err, fs.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", what, err)
		}
	}
}

// benchExtract writes files small files of 8 KiB with their mtime into a
// fresh 3-level deep directory per iteration, through create (which gets
// the directory's name and the file's base name).
func benchExtract(b *testing.B, files int, create func(f *FS, dir string) (func(base string) (*File, error), func(base string, t time.Time) error, func())) {
	fx := newFixtureIn(b, b.TempDir(), Options{UID: os.Getuid(), GID: os.Getgid()})
	f := fx.fs.Trusted()
	data := bytes.Repeat([]byte("x"), 8<<10)
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	names := make([]string, files)
	for i := range names {
		names[i] = "file-" + strconv.Itoa(i) + ".dat"
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		run := "run" + strconv.Itoa(i)
		dir := run + "/world/region/chunks"
		if err := f.MkdirAll(dir, 0); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		open, chtimes, done := create(f, dir)
		for _, n := range names {
			w, err := open(n)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := w.Write(data); err != nil {
				b.Fatal(err)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			if err := chtimes(n, mtime); err != nil {
				b.Fatal(err)
			}
		}
		done()
		b.StopTimer()
		if err := f.RemoveAll(context.Background(), run); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*files), "ns/file")
}

// BenchmarkDirCreate: 1 000 files of 8 KiB with their mtime in a 3-level
// deep directory, through one Dir (one lookup per entry).
func BenchmarkDirCreate(b *testing.B) {
	benchExtract(b, 1000, func(f *FS, dir string) (func(string) (*File, error), func(string, time.Time) error, func()) {
		d, err := f.OpenDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		return func(base string) (*File, error) { return d.Create(base, 0o644) },
			func(base string, t time.Time) error { return d.Lchtimes(base, t, t) },
			func() { _ = d.Close() }
	})
}

// BenchmarkOpenFileCreate: the same through FS.OpenFile and FS.Lchtimes
// (each a walk from the root).
func BenchmarkOpenFileCreate(b *testing.B) {
	benchExtract(b, 1000, func(f *FS, dir string) (func(string) (*File, error), func(string, time.Time) error, func()) {
		return func(base string) (*File, error) {
				return f.OpenFile(dir+"/"+base, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			},
			func(base string, t time.Time) error { return f.Lchtimes(dir+"/"+base, t, t) },
			func() {}
	})
}
