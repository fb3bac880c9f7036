package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func mustDirReader(t *testing.T, f *FS, name string) *DirReader {
	t.Helper()
	r, err := f.OpenDirReader(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// readAll drains r: name → is a directory.
func readAll(t *testing.T, r *DirReader) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for {
		name, isDir, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := out[name]; dup {
			t.Fatalf("%q listed twice", name)
		}
		out[name] = isDir
	}
}

// Every kind of entry: Next gives each name once with its type (a link to
// a directory is not a directory), and Lstat gives what os.Lstat gives.
func TestDirReaderNamesTypesAndLstat(t *testing.T) {
	fx := newFixture(t)
	in := filepath.Join(fx.root, "inside")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(syscall.Mkfifo(filepath.Join(in, "fifo"), 0o640))
	must(os.WriteFile(filepath.Join(in, "suid"), []byte("x"), 0o644))
	must(os.Chmod(filepath.Join(in, "suid"), 0o4755|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
	must(os.Mkdir(filepath.Join(in, "sticky"), 0o755))
	must(os.Chmod(filepath.Join(in, "sticky"), 0o1777|fs.ModeSticky))
	must(os.Symlink("nested", filepath.Join(in, "dirlink")))
	must(os.Symlink("/etc/passwd", filepath.Join(in, "outlink")))
	weird := []string{"quo\"te", "new\nline", "\xff\xfeinvalid", "<b>&amp;", "é", `back\slash`, "-"}
	for _, w := range weird {
		must(os.WriteFile(filepath.Join(in, w), []byte(w), 0o600))
	}
	ln, err := net.Listen("unix", filepath.Join(in, "sock"))
	must(err)
	defer ln.Close()
	if err := syscall.Mknod(filepath.Join(in, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Logf("no character device in the fixture: %v", err)
	}
	for i := range 3000 { // several getdents buffers
		must(os.WriteFile(filepath.Join(in, fmt.Sprintf("many-%04d-%s", i, strings.Repeat("x", 40))), nil, 0o644))
	}

	r := mustDirReader(t, fx.fs, "/inside")
	got := readAll(t, r)
	host, err := os.ReadDir(in)
	must(err)
	if len(got) != len(host) {
		t.Fatalf("listed %d entries, the directory has %d", len(got), len(host))
	}
	for _, e := range host {
		isDir, ok := got[e.Name()]
		if !ok || isDir != e.IsDir() {
			t.Fatalf("%q: listed %v (dir %v), want dir %v", e.Name(), ok, isDir, e.IsDir())
		}
		fi, err := r.Lstat(e.Name())
		must(err)
		want, err := os.Lstat(filepath.Join(in, e.Name()))
		must(err)
		if fi.Name() != want.Name() || fi.Mode() != want.Mode() || fi.Size() != want.Size() || !fi.ModTime().Equal(want.ModTime()) ||
			fi.IsDir() != want.IsDir() || *fi.Sys().(*syscall.Stat_t) != *want.Sys().(*syscall.Stat_t) {
			t.Fatalf("%q: Lstat %v %v %d %v, os.Lstat %v %v %d %v", e.Name(), fi.Name(), fi.Mode(), fi.Size(), fi.ModTime(),
				want.Name(), want.Mode(), want.Size(), want.ModTime())
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next after the end: %v", err)
	}
}

// The root and an in-root link to a directory can be read; a file, a
// FIFO, a link out and a missing name cannot, and opening never blocks.
func TestOpenDirReaderFollowsOnlyInRootDirectories(t *testing.T) {
	fx := newFixture(t)
	if err := syscall.Mkfifo(filepath.Join(fx.root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := readAll(t, mustDirReader(t, fx.fs, "/"))
	if _, ok := root["top.txt"]; !ok || !root["inside"] || root["goodlink"] {
		t.Fatalf("root listing: %v", root)
	}
	viaLink := readAll(t, mustDirReader(t, fx.fs, "goodlink"))
	if _, ok := viaLink["file.txt"]; !ok {
		t.Fatalf("listing through an in-root link: %v", viaLink)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for name, kind := range map[string]error{
			"top.txt": ErrNotDir, "fifo": ErrNotDir, "dirlink": ErrOutsideRoot, "reldirlink": ErrOutsideRoot,
			"inside/escape": ErrOutsideRoot, "missing": ErrNotExist, "../outside": ErrOutsideRoot,
		} {
			r, err := fx.fs.OpenDirReader(name)
			if err == nil {
				_ = r.Close()
			}
			if !errors.Is(err, kind) {
				t.Errorf("OpenDirReader(%q): %v, want %v", name, err, kind)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("OpenDirReader blocked")
	}
}

// Entry operations take one name of the directory: nothing else, no
// link followed, no FIFO waited on, denied names refused under the name
// given and under the real name.
func TestDirReaderEntriesStayInTheDirectory(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1, Denylist: []string{"inside/*.secret"}})
	in := filepath.Join(fx.root, "inside")
	if err := os.WriteFile(filepath.Join(in, "a.secret"), []byte("denied head"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(in, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(fx.outside, "secret.txt"), filepath.Join(in, "out")); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"inside", "goodlink"} {
		r := mustDirReader(t, fx.fs, dir)
		buf := make([]byte, 64)
		for _, bad := range []string{"", ".", "..", "../top.txt", "nested/../file.txt", "/etc/passwd", "a\x00b"} {
			if _, err := r.Lstat(bad); !errors.Is(err, ErrOutsideRoot) {
				t.Fatalf("%s: Lstat(%q): %v", dir, bad, err)
			}
			if _, err := r.ReadHead(bad, buf); !errors.Is(err, ErrOutsideRoot) {
				t.Fatalf("%s: ReadHead(%q): %v", dir, bad, err)
			}
		}
		if n, err := r.ReadHead("file.txt", buf); err != nil || string(buf[:n]) != "inside data" {
			t.Fatalf("%s: head of file.txt: %q %v", dir, buf[:n], err)
		}
		if _, err := r.ReadHead("a.secret", buf); !errors.Is(err, ErrDenied) {
			t.Fatalf("%s: head of a denied file: %v", dir, err)
		}
		if n, err := r.ReadHead("out", buf); err == nil || strings.Contains(string(buf[:n]), secret) {
			t.Fatalf("%s: head through a link out: %q %v", dir, buf[:n], err)
		}
		done := make(chan error, 1)
		go func() { _, err := r.ReadHead("fifo", buf); done <- err }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: ReadHead of a FIFO blocked", dir)
		}
	}
}

// A directory listed while a game process adds and removes entries: each
// name comes at most once and the reader ends.
func TestDirReaderUnderChurn(t *testing.T) {
	fx := newFixture(t)
	dir := filepath.Join(fx.root, "churn")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), nil, 0o644)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = os.Remove(filepath.Join(dir, fmt.Sprintf("f%d", i%2000)))
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("g%d", i)), nil, 0o644)
		}
	}()
	defer func() { close(stop); <-done }()
	for range 5 {
		readAll(t, mustDirReader(t, fx.fs, "churn"))
	}
}
