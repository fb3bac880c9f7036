package files

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/wharf/wharf/internal/sandbox"
)

// oldList is the listing as Wharf answered it before it was streamed
// (commit 25e0722): the whole directory through the sandbox walker (or
// by name through an in-root link), every Stat held, sorted directories
// first then by name, and the slice encoded at once. The streamed listing
// must give the same bytes.
func oldList(m *Manager, dir string) ([]byte, error) {
	fi, err := m.FS.Lstat(dir)
	if err != nil {
		return nil, err
	}
	var out []Stat
	switch {
	case fi.IsDir():
		out, err = oldListWalk(m, dir)
	case fi.Mode()&fs.ModeSymlink != 0:
		out, err = oldListByName(m, dir)
	default:
		return nil, ErrNotDirectory
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Stat) int {
		if a.Directory != b.Directory {
			if a.Directory {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	var buf bytes.Buffer
	err = json.NewEncoder(&buf).Encode(out)
	return buf.Bytes(), err
}

func oldListWalk(m *Manager, dir string) ([]Stat, error) {
	out := []Stat{}
	head := make([]byte, sniffLen)
	first := true
	err := m.FS.Walk(dir, func(rel string, d fs.DirEntry, err error) error {
		if first {
			first = false
			return err
		}
		if err != nil {
			return nil
		}
		fi, ierr := d.Info()
		if ierr != nil {
			return nil
		}
		if d.IsDir() {
			out = append(out, NewStat(fi, MimeDirectory))
			return fs.SkipDir
		}
		mime := MimeBinary
		if fi.Mode().IsRegular() {
			mime = m.mimeOfEntry(fi, head, rel, d)
		}
		out = append(out, NewStat(fi, mime))
		return nil
	})
	return out, err
}

func oldListByName(m *Manager, dir string) ([]Stat, error) {
	fi, err := m.FS.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, ErrNotDirectory
	}
	entries, err := m.FS.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]Stat, 0, len(entries))
	head := make([]byte, sniffLen)
	for _, e := range entries {
		rel := dir + "/" + e.Name()
		fi, err := m.FS.Lstat(rel)
		if err != nil {
			continue
		}
		mime := MimeBinary
		switch {
		case fi.IsDir():
			mime = MimeDirectory
		case fi.Mode().IsRegular():
			mime = m.mimeOf(fi, head, func() (*sandbox.File, error) { return m.FS.Open(rel) })
		}
		out = append(out, NewStat(fi, mime))
	}
	return out, nil
}

// listingFixture is a server root with every kind of entry a listing
// meets, under "d" (and "d/sub"), next to a file outside the root.
func listingFixture(t *testing.T) *Manager {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside.txt")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(rel string, data []byte, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(root, rel)
		must(os.MkdirAll(filepath.Dir(p), 0o755))
		must(os.WriteFile(p, data, mode))
		must(os.Chmod(p, mode))
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("data"))
	_ = zw.Close()
	must(os.WriteFile(outside, []byte("outside"), 0o644))
	for _, d := range []string{"d", "d/sub", "d/Zdir", "empty"} {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	write("d/text.txt", []byte("hello"), 0o644)
	write("d/conf.json", []byte(`{"a":1}`), 0o640)
	write("d/noext", []byte("plain words\n"), 0o600)
	write("d/world.gz", gz.Bytes(), 0o644)
	write("d/plugin.jar", []byte("PK\x03\x04rest"), 0o644)
	write("d/binary.dat", []byte{0, 1, 2, 3, 0xff}, 0o644)
	write("d/empty.bin", nil, 0o644)
	write("d/archive.secret", gz.Bytes(), 0o644) // denied: typed without reading it
	write("d/unreadable.gz", gz.Bytes(), 0o000)  // mode 000 (root reads it anyway)
	write("d/suid", []byte("x"), 0o755)          // ModeSetuid below
	write("d/sub/inner.gz", gz.Bytes(), 0o644)   // not listed: one level only
	write("d/Zdir/.hidden", []byte("h"), 0o644)  // idem
	for _, weird := range []string{`quo"te`, "new\nline", "tab\there", "\xff\xfe-invalid", "<html>&amp;", "é-accent", `back\slash`, "\u2028sep"} {
		write("d/"+weird, []byte("weird"), 0o644)
	}
	must(syscall.Chmod(filepath.Join(root, "d/suid"), 0o4755))
	must(os.Symlink("text.txt", filepath.Join(root, "d/link-in")))
	must(os.Symlink("sub", filepath.Join(root, "d/link-dir")))
	must(os.Symlink(outside, filepath.Join(root, "d/link-out")))
	must(os.Symlink("../../outside.txt", filepath.Join(root, "d/link-out-rel")))
	must(os.Symlink("missing", filepath.Join(root, "d/link-dangling")))
	must(syscall.Mkfifo(filepath.Join(root, "d/fifo"), 0o644))
	ln, err := net.Listen("unix", filepath.Join(root, "d/sock"))
	must(err)
	t.Cleanup(func() { ln.Close() })
	must(os.Symlink("d", filepath.Join(root, "dlink")))
	for i := range 700 { // more than one batch of the context checks
		write(fmt.Sprintf("d/many/f%03d.log", i), nil, 0o644)
	}
	fsys, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1, Denylist: []string{"*.secret"}})
	must(err)
	t.Cleanup(func() { fsys.Close() })
	return New(fsys)
}

func streamed(t *testing.T, m *Manager, dir string, budget int) []byte {
	t.Helper()
	l, err := m.OpenListing(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if budget > 0 {
		l.sortBudget = budget
	}
	var buf bytes.Buffer
	if err := l.WriteJSON(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The streamed listing is byte for byte the old one: every kind of entry,
// weird names, a listing through an in-root link, an empty directory.
func TestListingBytesAsBefore(t *testing.T) {
	m := listingFixture(t)
	for _, dir := range []string{"d", "/d/", "dlink", "empty", "/", "d/many"} {
		want, err := oldList(m, dir)
		if err != nil {
			t.Fatal(err)
		}
		got := streamed(t, m, dir, 0)
		if !bytes.Equal(got, want) {
			t.Fatalf("listing of %q differs from the old one:\n got %s\nwant %s", dir, got, want)
		}
	}
	// The fixture holds what it should: a control that the comparison
	// covered every kind.
	var list []Stat
	if err := json.Unmarshal(streamed(t, m, "d", 0), &list); err != nil {
		t.Fatal(err)
	}
	byName := map[string]Stat{}
	for _, s := range list {
		byName[s.Name] = s
	}
	for name, mime := range map[string]string{
		"sub": MimeDirectory, "text.txt": MimeText, "world.gz": "application/gzip", "archive.secret": MimeBinary,
		"unreadable.gz": "application/gzip", "fifo": MimeBinary, "link-out": MimeBinary, "empty.bin": MimeText,
		"quo\"te": MimeText, "new\nline": MimeText, "\ufffd\ufffd-invalid": MimeText,
	} {
		if s, ok := byName[name]; !ok || s.Mime != mime {
			t.Errorf("%q: %+v, want mime %s", name, s, mime)
		}
	}
	if s := byName["link-dir"]; !s.Symlink || s.Directory {
		t.Errorf("link-dir: %+v", s)
	}
	if s := byName["suid"]; s.Mode != "urwxr-xr-x" || s.ModeBits != "755" {
		t.Errorf("suid: %+v", s)
	}
	if list[0].Name != "Zdir" || list[1].Name != "many" || list[2].Name != "sub" {
		t.Errorf("order: %q %q %q first", list[0].Name, list[1].Name, list[2].Name)
	}
}

// Past its sort budget a listing comes in the directory's order: the same
// entries, each once, with the same descriptions.
func TestListingPastTheSortBudget(t *testing.T) {
	m := listingFixture(t)
	var want, got []Stat
	old, err := oldList(m, "d/many")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(old, &want); err != nil {
		t.Fatal(err)
	}
	for _, budget := range []int{1, 2048} {
		out := streamed(t, m, "d/many", budget)
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("budget %d: %v: %s", budget, err, out)
		}
		if slices.EqualFunc(got, want, func(a, b Stat) bool { return a == b }) {
			t.Fatalf("budget %d: the listing is still sorted (the budget was not reached)", budget)
		}
		slices.SortFunc(got, func(a, b Stat) int { return strings.Compare(a.Name, b.Name) })
		if !slices.Equal(got, want) {
			t.Fatalf("budget %d: %d entries, want %d, or descriptions differ", budget, len(got), len(want))
		}
	}
}

// failAfter fails every write once n bytes have gone through.
type failAfter struct{ n int }

var errClientGone = errors.New("client gone")

func (w *failAfter) Write(p []byte) (int, error) {
	if w.n < len(p) {
		return 0, errClientGone
	}
	w.n -= len(p)
	return len(p), nil
}

// A listing stops at a failed write and at a cancelled context, and says
// so (the caller must not answer a truncated array as if it were whole).
func TestListingStopsOnWriteErrorAndCancel(t *testing.T) {
	m := listingFixture(t)
	l, err := m.OpenListing("d/many")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.WriteJSON(context.Background(), &failAfter{n: 40 << 10}); !errors.Is(err, errClientGone) {
		t.Fatalf("after a failed write: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	l2, err := m.OpenListing("d/many")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	seen := 0
	err = l2.Each(ctx, func(Stat) error {
		if seen++; seen == 10 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || seen >= 700 {
		t.Fatalf("after cancel: %v after %d entries", err, seen)
	}
}

func TestOpenListingRefusals(t *testing.T) {
	m := listingFixture(t)
	for name, want := range map[string]error{
		"d/text.txt": ErrNotDirectory, "d/fifo": ErrNotDirectory, "d/link-in": ErrNotDirectory,
		"missing": sandbox.ErrNotExist, "d/link-out": sandbox.ErrOutsideRoot, "../root": sandbox.ErrOutsideRoot,
	} {
		l, err := m.OpenListing(name)
		if err == nil {
			l.Close()
		}
		if !errors.Is(err, want) {
			t.Errorf("OpenListing(%q): %v, want %v", name, err, want)
		}
	}
}
