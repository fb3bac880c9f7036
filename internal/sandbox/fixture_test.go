package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const secret = "SECRET-CONTENT-OUTSIDE"

var oldTime = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

// fixture is a server root with hostile and friendly links, next to a
// directory "outside" that must never be touched.
type fixture struct {
	base, root, outside string
	fs                  *FS
}

func newFixture(t testing.TB, opts ...Options) *fixture {
	t.Helper()
	return newFixtureIn(t, t.TempDir(), opts...)
}

func newFixtureIn(t testing.TB, base string, opts ...Options) *fixture {
	t.Helper()
	fx := &fixture{base: base, root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(fx.outside, "sub"), 0o700))
	must(os.WriteFile(filepath.Join(fx.outside, "secret.txt"), []byte(secret), 0o600))
	must(os.WriteFile(filepath.Join(fx.outside, "sub", "deep.txt"), []byte(secret), 0o600))
	must(os.MkdirAll(filepath.Join(fx.root, "inside", "nested"), 0o755))
	must(os.WriteFile(filepath.Join(fx.root, "inside", "file.txt"), []byte("inside data"), 0o644))
	must(os.WriteFile(filepath.Join(fx.root, "top.txt"), []byte("top"), 0o644))
	links := map[string]string{
		"dirlink":          fx.outside,                              // absolute link to a directory outside
		"reldirlink":       "../outside",                            // relative link to a directory outside
		"filelink":         filepath.Join(fx.outside, "secret.txt"), // link to a file outside
		"relfilelink":      "../outside/secret.txt",
		"dangling":         filepath.Join(fx.outside, "created"), // dangling link pointing outside
		"reldangling":      "../outside/created-rel",
		"chain1":           "chain2", // two-hop dangling chain
		"chain2":           filepath.Join(fx.outside, "chained"),
		"loop1":            "loop2",
		"loop2":            "loop1",
		"selfloop":         "selfloop",
		"goodlink":         "inside",          // stays inside: must keep working
		"goodfilelink":     "inside/file.txt", // stays inside
		"inside/shared":    "../top.txt",      // relative link inside the root
		"inside/escape":    "../../outside",   // nested link climbing out
		"inside/nested/up": "../../dirlink",   // link to a link that leads out
	}
	for name, target := range links {
		must(os.Symlink(target, filepath.Join(fx.root, name)))
	}
	for _, p := range []string{filepath.Join(fx.outside, "secret.txt"), filepath.Join(fx.outside, "sub", "deep.txt"), filepath.Join(fx.outside, "sub"), fx.outside} {
		must(os.Chtimes(p, oldTime, oldTime))
	}
	o := Options{UID: -1, GID: -1}
	if len(opts) > 0 {
		o = opts[0]
	}
	f, err := New(fx.root, o)
	must(err)
	t.Cleanup(func() { _ = f.Close() })
	fx.fs = f
	return fx
}

type entry struct {
	Mode     fs.FileMode
	Size     int64
	MTime    time.Time
	UID, GID uint32
	Sum      string
	Link     string
}

// snapshot describes everything under base except the root: what an
// escape could read-modify, create or delete.
func (fx *fixture) snapshot(t testing.TB) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	err := filepath.WalkDir(fx.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == fx.root {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		e := entry{Mode: fi.Mode(), Size: fi.Size(), MTime: fi.ModTime(), UID: st.Uid, GID: st.Gid}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			e.Sum = hex.EncodeToString(s[:])
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			e.Link, _ = os.Readlink(p)
		}
		rel, _ := filepath.Rel(fx.base, p)
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (fx *fixture) assertOutsideUnchanged(t testing.TB, before map[string]entry) {
	t.Helper()
	if diff := cmp.Diff(before, fx.snapshot(t)); diff != "" {
		t.Fatalf("outside of the root changed (-before +after):\n%s", diff)
	}
}

func owner(fi os.FileInfo) (uint32, uint32) {
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}
