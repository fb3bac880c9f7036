package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/sandbox/internal/fdwalk"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// aheadTree makes inside/dNN (n directories of files, each with a
// subdirectory) and returns the fixture, its tree settled (every
// directory unchanged for longer than tune.settled, which the test makes
// short).
func aheadTree(t *testing.T, n int) *fixture {
	t.Helper()
	fx := newFixture(t, Options{UID: -1, GID: -1})
	for i := range n {
		d := filepath.Join(fx.root, "inside", fmt.Sprintf("d%02d", i))
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		for k := range 20 {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%02d", k)), []byte(d), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	fx.fs.s.ahead.After, fx.fs.s.ahead.Settled = 0, 30*time.Millisecond
	made := time.Now()
	wait.For(t, 5*time.Second, func() bool { return time.Since(made) > 2*fx.fs.s.ahead.Settled }, "the tree to settle")
	return fx
}

// walkRecord walks inside and records every entry with its lstat data.
func walkRecord(t *testing.T, fx *fixture, fn func(p string, d fs.DirEntry)) []string {
	t.Helper()
	var got []string
	err := fx.fs.Walk("inside", func(p string, d fs.DirEntry, err error) error {
		if Vanished(err) {
			got = append(got, p+" vanished")
			return nil
		}
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		got = append(got, fmt.Sprintf("%s %v %d %d", p, fi.Mode(), fi.Size(), st.Ino))
		if fn != nil {
			fn(p, d)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A walk whose next directories were listed ahead reports exactly what a
// walk listing each directory on entering it does, in the same order.
// The walk waits in the first directory until the lister has listed the
// next ones, so that it does use their listings.
func TestWalkListingAheadReportsTheSameEntries(t *testing.T) {
	fx := aheadTree(t, 30)
	var listed atomic.Int32
	fx.fs.s.ahead.Listed = func() { listed.Add(1) }
	used := 0
	fx.fs.s.ahead.Used = func(n int) { used = n }
	got := walkRecord(t, fx, func(p string, d fs.DirEntry) {
		if p == "inside/d00/f00" {
			wait.For(t, 10*time.Second, func() bool { return listed.Load() >= fdwalk.AheadPerDir+1 }, "the lister")
		}
	})
	if used < fdwalk.AheadPerDir {
		t.Fatalf("the walk used %d listings ahead, want at least %d", used, fdwalk.AheadPerDir)
	}
	fx.fs.s.ahead.After = 1 << 30 // no lister
	want := walkRecord(t, fx, nil)
	if used != 0 {
		t.Fatalf("a walk without the lister used %d listings ahead", used)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("with the lister:\n%v\nwithout:\n%v", got, want)
	}
}

// A directory changed after it was listed ahead (an entry added, one
// removed), itself or as a subdirectory listed with its parent, is listed
// again when the walk enters it; one swapped for a link is not followed; one skipped is not walked; and the walk gives
// back every descriptor.
func TestWalkListingAheadSeesChangesMadeSince(t *testing.T) {
	fx := aheadTree(t, 12)
	in := filepath.Join(fx.root, "inside")
	var listed atomic.Int32
	fx.fs.s.ahead.Listed = func() { listed.Add(1) }
	base := openFDs(t)
	seen := map[string]bool{}
	walkRecord(t, fx, func(p string, d fs.DirEntry) {
		seen[p] = true
		if p != "inside/d00/f00" {
			return
		}
		// The jobs d01-d04 with their subdirectories, and d00/sub.
		wait.For(t, 10*time.Second, func() bool { return listed.Load() >= 2*fdwalk.AheadPerDir+1 }, "the lister")
		for _, err := range []error{
			// Subdirectories listed with their parent: one changed, one
			// swapped for a link.
			os.WriteFile(filepath.Join(in, "d01", "sub", "new"), nil, 0o644),
			os.Rename(filepath.Join(in, "d05", "sub"), filepath.Join(fx.root, "moved-sub")),
			os.Symlink(fx.outside, filepath.Join(in, "d05", "sub")),
			os.WriteFile(filepath.Join(in, "d02", "new"), nil, 0o644),
			os.Remove(filepath.Join(in, "d03", "f05")),
			os.Rename(filepath.Join(in, "d04"), filepath.Join(fx.root, "moved")),
			os.Symlink(fx.outside, filepath.Join(in, "d04")),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	})
	if !seen["inside/d02/new"] || seen["inside/d03/f05"] || !seen["inside/d03/f04"] || !seen["inside/d01/sub/new"] {
		t.Fatalf("the walk missed a change made after the listing ahead: d02/new %v, d03/f05 %v, d03/f04 %v",
			seen["inside/d02/new"], seen["inside/d03/f05"], seen["inside/d03/f04"])
	}
	if seen["inside/d04/f00"] || seen["inside/d04/sub"] || seen["inside/d04/secret.txt"] || seen["inside/d05/sub/secret.txt"] {
		t.Fatal("the walk went into a directory swapped for a link after its listing ahead")
	}
	if n := openFDs(t); n != base {
		t.Fatalf("%d descriptors open after the walk, %d before", n, base)
	}
}

// Directories listed ahead and then skipped (fs.SkipDir), or left when
// the walk stops (fs.SkipAll, an error), hold nothing once the walk
// returned.
func TestWalkListingAheadEndsWithTheWalk(t *testing.T) {
	fx := aheadTree(t, 20)
	var listed atomic.Int32
	fx.fs.s.ahead.Listed = func() { listed.Add(1) }
	base := openFDs(t)
	for _, stop := range []error{fs.SkipDir, fs.SkipAll, fs.ErrInvalid} {
		listed.Store(0)
		var seen []string
		err := fx.fs.Walk("inside", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			seen = append(seen, p)
			switch p {
			case "inside/d00/f00":
				wait.For(t, 10*time.Second, func() bool { return listed.Load() >= fdwalk.AheadPerDir+1 }, "the lister")
			case "inside/d03":
				if stop == fs.SkipDir {
					return fs.SkipDir
				}
			case "inside/d05":
				return stop
			}
			return nil
		})
		if stop == fs.ErrInvalid && err != fs.ErrInvalid || stop != fs.ErrInvalid && err != nil {
			t.Fatalf("stop %v: walk returned %v", stop, err)
		}
		for _, p := range seen {
			up := filepath.Dir(p)
			if up == "inside/d05" || stop == fs.SkipDir && up == "inside/d03" || stop != fs.SkipDir && up == "inside/d06" {
				t.Fatalf("stop %v: the walk reported %s", stop, p)
			}
		}
		if n := openFDs(t); n != base {
			t.Fatalf("stop %v: %d descriptors open after the walk, %d before", stop, n, base)
		}
	}
}
