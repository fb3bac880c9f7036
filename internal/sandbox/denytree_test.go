package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// denyTreeFixture is a root where config/license.key, any token.txt,
// vault/license.key and *.secret (but keep.secret) are denied, with an
// in-root link to the root ("here") and one to config ("alias").
func denyTreeFixture(t *testing.T) *fixture {
	t.Helper()
	fx := newFixture(t, Options{UID: -1, GID: -1, Denylist: []string{
		"config/license.key", "**/token.txt", "vault/license.key", "*.secret", "!keep.secret",
	}})
	for p, data := range map[string]string{
		"config/license.key":  "LICENSE",
		"config/other.txt":    "other",
		"deep/a/b/token.txt":  "TOKEN",
		"staging/license.key": "user content",
		"free/ok.txt":         "ok",
		"neg/keep.secret":     "not denied",
	} {
		mustWriteFile(t, filepath.Join(fx.root, p), data)
	}
	for link, target := range map[string]string{"here": ".", "alias": "config"} {
		if err := os.Symlink(target, filepath.Join(fx.root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return fx
}

func mustWriteFile(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDenyTreeAncestors: renaming, moving, removing or chmod-ing a
// directory above a denied file is refused with ErrDenied, under its own
// name and through an in-root link, with nested ("**") patterns, and when
// a rename would give an entry a denied name; nothing changes.
func TestDenyTreeAncestors(t *testing.T) {
	fx := denyTreeFixture(t)
	f := fx.fs
	ctx := context.Background()
	refused := map[string]error{
		"rename config":              f.Rename("config", "moved"),
		"move config down":           f.Rename("config", "free/config"),
		"rename config through link": f.Rename("here/config", "moved"),
		"rename nested pattern":      f.Rename("deep", "shallow"),
		"rename nested grandparent":  f.Rename("deep/a", "a"),
		"rename onto a denied name":  f.Rename("staging", "vault"),
		"rename into a denied name":  f.Rename("staging", "here/vault"),
		"removeall config":           f.RemoveAll(ctx, "config"),
		"removeall through link":     f.RemoveAll(ctx, "here/config"),
		"removeall grandparent":      f.RemoveAll(ctx, "deep/a"),
		"removeall root":             f.RemoveAll(ctx, "/"),
		"chmod config":               f.Chmod("config", 0o700),
		"chmod through link":         f.Chmod("here/config", 0o700),
		"chmod root":                 f.Chmod(".", 0o700),
	}
	for what, err := range refused {
		if !errors.Is(err, ErrDenied) || !errors.Is(err, fs.ErrPermission) {
			t.Errorf("%s = %v, want ErrDenied", what, err)
		}
	}
	for p, want := range map[string]string{"config/license.key": "LICENSE", "deep/a/b/token.txt": "TOKEN", "staging/license.key": "user content"} {
		if b, err := os.ReadFile(filepath.Join(fx.root, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v", p, b, err)
		}
	}
	for _, p := range []string{"moved", "shallow", "a", "vault", "free/config"} {
		if _, err := os.Lstat(filepath.Join(fx.root, p)); err == nil {
			t.Errorf("%s exists", p)
		}
	}
	if fi, err := os.Stat(filepath.Join(fx.root, "config")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("config: %v, %v", fi, err)
	}

	// What holds no denied name moves, and so does a link to config (the
	// link moves, not config) and a name the negation re-includes.
	for what, err := range map[string]error{
		"rename a link to config": f.Rename("alias", "alias2"),
		"rename a sibling":        f.Rename("config/other.txt", "config/other2.txt"),
		"rename free":             f.Rename("free", "free2"),
		"rename a negation":       f.Rename("neg", "neg2"),
		"chmod free":              f.Chmod("free2", 0o750),
		"removeall free":          f.RemoveAll(ctx, "free2"),
		"removeall a link":        f.RemoveAll(ctx, "alias2"),
	} {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	if _, err := os.Stat(filepath.Join(fx.root, "config/license.key")); err != nil {
		t.Errorf("removing a link to config removed config: %v", err)
	}
	// A missing name is still no error for RemoveAll, and still is for Rename.
	if err := f.RemoveAll(ctx, "nothing/x"); err != nil {
		t.Errorf("removeall of a missing name: %v", err)
	}
	if err := f.Rename("nothing", "y"); !errors.Is(err, ErrNotExist) {
		t.Errorf("rename of a missing name: %v", err)
	}
	// The trusted view moves anything.
	if err := f.Trusted().Rename("config", "moved"); err != nil {
		t.Errorf("trusted rename: %v", err)
	}
}

// TestDenyTreeFastPath: when no pattern can reach below a directory, it is
// not walked at all (a large directory costs nothing); when one can, the
// walk finds the denied file wherever it is.
func TestDenyTreeFastPath(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1, Denylist: []string{"config/license.key", "/logs/*.gz"}})
	for i := range 2000 {
		mustWriteFile(t, filepath.Join(fx.root, "data", strconv.Itoa(i%20), strconv.Itoa(i)+".key"), "x")
	}
	mustWriteFile(t, filepath.Join(fx.root, "config/license.key"), "LICENSE")
	d := fx.fs.s.deny.Load()
	ctx := context.Background()
	for _, c := range []struct {
		rel, to        string
		denied, walked bool
	}{
		{"data", "", false, false},
		{"data", "data2", false, false},
		{"data/3", "elsewhere/x", false, false},
		{"config", "", true, true},
		{"data", "config", false, true}, // moving onto config: its entries are checked
		{".", "", true, true},
	} {
		denied, visited, err := fx.fs.s.scanDenyTree(ctx, d, c.rel, c.to)
		if err != nil || denied != c.denied || (visited > 0) != c.walked {
			t.Errorf("scan %q -> %q: denied %v, visited %d, %v; want denied %v, walked %v", c.rel, c.to, denied, visited, err, c.denied, c.walked)
		}
	}
	if err := fx.fs.Rename("data", "data2"); err != nil {
		t.Fatal(err)
	}
	// An unanchored pattern can match anywhere: the subtree is walked.
	fx.fs.SetDenylist([]string{"*.key"})
	denied, visited, err := fx.fs.s.scanDenyTree(ctx, fx.fs.s.deny.Load(), "data2", "")
	if err != nil || !denied || visited == 0 {
		t.Errorf("*.key: denied %v, visited %d, %v", denied, visited, err)
	}
}

// TestDenyTreeStopsWithContext: a cancelled context stops the walk and
// refuses the operation; nothing is removed.
func TestDenyTreeStopsWithContext(t *testing.T) {
	fx := denyTreeFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for what, err := range map[string]error{
		"removeall": fx.fs.RemoveAll(ctx, "deep"),
		"rename":    fx.fs.RenameContext(ctx, "deep", "d2"),
		"chmod":     fx.fs.ChmodContext(ctx, "deep", 0o700),
	} {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v, want context.Canceled", what, err)
		}
	}
	if _, err := os.Stat(filepath.Join(fx.root, "deep/a/b/token.txt")); err != nil {
		t.Fatal(err)
	}
}

func TestMayDenyWithin(t *testing.T) {
	for _, c := range []struct {
		patterns []string
		rel      string
		want     bool
	}{
		{[]string{"config/license.key"}, "config", true},
		{[]string{"config/license.key"}, ".", true},
		{[]string{"config/license.key"}, "config/license.key", true},
		{[]string{"config/license.key"}, "config/license.key/x", true}, // below a denied name
		{[]string{"config/license.key"}, "data", false},
		{[]string{"config/license.key"}, "config/sub", false},
		{[]string{"/config/*.yml"}, "config", true},
		{[]string{"/config/*.yml"}, "other/config", false},
		{[]string{"c*/x"}, "cfg", true},
		{[]string{"c*/x"}, "data", false},
		{[]string{"logs/"}, "data", true}, // no "/" but the trailing one: any depth
		{[]string{"*.key"}, "data", true},
		{[]string{"**/token.txt"}, "data", true},
		{[]string{"a/**/b"}, "a", true},
		{[]string{"a/**/b"}, "z", false},
		{[]string{"!config/x"}, "config", false}, // a negation denies nothing
		{[]string{"[/x"}, "a", true},             // a bad glob: unsure, so walk
		{nil, "config", false},
	} {
		d := compileDenylist(c.patterns)
		if got := d.mayDenyWithin(c.rel); got != c.want {
			t.Errorf("%q within %q = %v, want %v", c.patterns, c.rel, got, c.want)
		}
	}
}

// FuzzMayDenyWithin checks the fast path against the matcher: whenever a
// name is denied, mayDenyWithin is true for every name on its way from
// the root (it may only err towards walking).
func FuzzMayDenyWithin(f *testing.F) {
	for _, s := range [][2]string{
		{"config/license.key", "config/license.key"},
		{"/config/*.yml", "config/a.yml"},
		{"**/token.txt", "a/b/token.txt"},
		{"a/**/b/c", "a/x/y/b/c/d"},
		{"logs/", "x/logs/y"},
		{"a//b", "a/b"},
		{"c?g/ *", "cfg/ x"},
		{"x\\ ", "x /y"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		if strings.ContainsAny(pattern, "\n\x00") {
			return
		}
		rel, err := clean("fuzz", name)
		if err != nil || rel == "." {
			return
		}
		d := compileDenylist([]string{pattern})
		if d == nil || !d.match(rel) {
			return
		}
		parts := strings.Split(rel, "/")
		for i := 0; i <= len(parts); i++ {
			prefix := strings.Join(parts[:i], "/")
			if i == 0 {
				prefix = "."
			}
			if !d.mayDenyWithin(prefix) {
				t.Fatalf("pattern %q denies %q but mayDenyWithin(%q) is false", pattern, rel, prefix)
			}
		}
	})
}
