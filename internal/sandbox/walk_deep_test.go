package sandbox

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// deepChain makes depth directories named "d" one inside the other under
// dir (each created relative to its parent's descriptor: the full path is
// longer than PATH_MAX), with side (when not empty) as a subdirectory of
// every level next to the "d", and a file "bottom.txt" holding bottom at
// the end. It returns the walk path of that file relative to dir.
func deepChain(t testing.TB, dir string, depth int, side, bottom string) string {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range depth {
		if side != "" {
			if err := unix.Mkdirat(fd, side, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		_ = unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	defer unix.Close(fd)
	f, err := unix.Openat(fd, "bottom.txt", unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(f)
	if _, err := unix.Write(f, []byte(bottom)); err != nil {
		t.Fatal(err)
	}
	return strings.Repeat("d/", depth) + "bottom.txt"
}

func openFDs(t testing.TB) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// A walk of a tree 2,500 levels deep (a path of 5,000 bytes) reports
// every level and the file at the bottom, reads it through OpenEntry, and
// never holds more than a few descriptors above heldLevels; so does the
// parallel walk. Every level has a second subdirectory, listed before the
// chain's, so that a walk keeping a directory open until all its
// subdirectories are taken would hold every level.
func TestWalkOfADeepTreeHoldsFewDescriptors(t *testing.T) {
	const depth = 2500
	fx := newFixture(t, Options{UID: -1, GID: -1})
	want := deepChain(t, filepath.Join(fx.root, "inside"), depth, "a", "at the bottom")
	want = "inside/" + want
	for _, parallel := range []bool{false, true} {
		base := openFDs(t)
		var mu sync.Mutex
		peak, dirs, sides, calls := 0, 0, 0, 0
		got := ""
		fn := func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Errorf("walk error at %s: %v", ShortPath(p), err)
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if calls++; calls%5 == 0 { // the deep levels hold their count for long
				peak = max(peak, openFDs(t))
			}
			switch {
			case d.Name() == "a":
				sides++
			case d.IsDir():
				dirs++
			case p == want:
				f, err := fx.fs.OpenEntry(p, d)
				if err != nil {
					t.Errorf("OpenEntry at the bottom: %v", err)
					return nil
				}
				b, _ := io.ReadAll(f)
				_ = f.Close()
				got = string(b)
			}
			return nil
		}
		var err error
		if parallel {
			err = fx.fs.WalkParallel(context.Background(), "inside", 2, fn)
		} else {
			err = fx.fs.Walk("inside", fn)
		}
		if err != nil {
			t.Fatalf("parallel %v: %v", parallel, err)
		}
		if got != "at the bottom" || dirs < depth || sides != depth {
			t.Fatalf("parallel %v: bottom file %q, %d directories, %d side directories; want all %d levels", parallel, got, dirs, sides, depth)
		}
		limit := heldLevels + 4 // the walk's own, the file read at the bottom, /proc's listing
		if parallel {
			limit = 2*(heldLevels+2) + 3
		}
		if peak-base > limit {
			t.Fatalf("parallel %v: the walk held %d descriptors at once, want at most %d", parallel, peak-base, limit)
		}
		if n := openFDs(t); n != base {
			t.Fatalf("parallel %v: %d descriptors open after the walk, %d before", parallel, n, base)
		}
	}
}

// lowerFDLimit sets the soft descriptor limit to what is open now, so
// that the next open fails with EMFILE (the daemon at its limit), until
// the returned function restores it.
func lowerFDLimit(t testing.TB) func() {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	// The kernel refuses a descriptor whose number would reach the limit:
	// the lowest free number is the next one given.
	free, err := unix.Dup(0)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Close(free)
	low := old
	low.Cur = uint64(free)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
	}
}

// At its descriptor limit, a walk cannot open a directory: fn gets the
// error, naming that directory, and it is not one Vanished accepts; a
// caller that returns it ends the walk with it.
func TestWalkReportsADirectoryItCannotOpen(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1})
	deepChain(t, filepath.Join(fx.root, "inside"), 40, "", "x")
	for _, parallel := range []bool{false, true} {
		var restore func()
		var seen error
		fn := func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				seen = err
				return err
			}
			if p == "inside/"+strings.Repeat("d/", 29)+"d" && restore == nil {
				restore = lowerFDLimit(t)
			}
			return nil
		}
		var err error
		if parallel {
			err = fx.fs.WalkParallel(context.Background(), "inside", 1, fn)
		} else {
			err = fx.fs.Walk("inside", fn)
		}
		if restore == nil {
			t.Fatal("the walk never reached the 30th level")
		}
		restore()
		wantPath := "/inside/" + strings.Repeat("d/", 29) + "d"
		var se *Error
		if !errors.As(seen, &se) || se.Path != wantPath || !errors.Is(seen, unix.EMFILE) || Vanished(seen) {
			t.Fatalf("parallel %v: fn saw %v, want EMFILE at %s", parallel, seen, wantPath)
		}
		if err != seen {
			t.Fatalf("parallel %v: the walk returned %v, want fn's error", parallel, err)
		}
	}
}

// A file that vanishes during the walk is left out quietly (Vanished);
// the walk goes on.
func TestWalkErrorsThatOnlySayAnEntryWentAway(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1})
	for _, name := range []string{"a/x", "b/y"} {
		if err := os.MkdirAll(filepath.Join(fx.root, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var errs []error
	var seen []string
	err := fx.fs.Walk(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		seen = append(seen, p)
		if p == "a" { // replaced by a link after it was listed, before it is opened
			if err := os.Rename(filepath.Join(fx.root, "a"), filepath.Join(fx.root, "gone")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(fx.outside, filepath.Join(fx.root, "a")); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != 1 || !Vanished(errs[0]) {
		t.Fatalf("errors %v, want one that Vanished accepts", errs)
	}
	if !strings.Contains(strings.Join(seen, " "), "b/y") {
		t.Fatalf("the walk stopped: %v", seen)
	}
}

// A deep directory moved while the walk is below it: the walk comes back
// to its parent by name and goes on; when the parent cannot be reached
// either, the walk fails with ErrWalkMoved naming it, instead of going on
// without it.
func TestWalkComesBackThroughMovedDirectories(t *testing.T) {
	level := func(root string, n int) string { return filepath.Join(root, "inside", strings.Repeat("d/", n)) }
	for _, both := range []bool{false, true} {
		fx := newFixture(t, Options{UID: -1, GID: -1})
		deepChain(t, filepath.Join(fx.root, "inside"), 40, "", "x")
		// A file after "d" at level 30, reported once the walk is back.
		if err := os.WriteFile(filepath.Join(level(fx.root, 30), "z"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		sawZ := false
		err := fx.fs.Walk("inside", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if strings.HasSuffix(p, "/z") {
				sawZ = true
			}
			if p == "inside/"+strings.Repeat("d/", 34)+"d" {
				// Level 31 leaves level 30: its ".." is no longer level 30.
				if err := os.Rename(level(fx.root, 31), filepath.Join(fx.root, "m31")); err != nil {
					t.Fatal(err)
				}
				if both { // and level 30 cannot be reached by name
					if err := os.Rename(level(fx.root, 20), filepath.Join(fx.root, "m20")); err != nil {
						t.Fatal(err)
					}
				}
			}
			return nil
		})
		if !both && (err != nil || !sawZ) {
			t.Fatalf("one move: walk %v, saw the file after the moved directory: %v", err, sawZ)
		}
		var se *Error
		if both && (!errors.As(err, &se) || !errors.Is(err, ErrWalkMoved) || se.Path != "/inside/"+strings.Repeat("d/", 29)+"d") {
			t.Fatalf("two moves: walk returned %v, want ErrWalkMoved at level 30", err)
		}
	}
}

// DeniedWalkEntry says what DeniedEntry says, for every entry of a walk,
// in time linear in the depth: a deep tree's entries under a denylist are
// all checked in well under the time one prefix-by-prefix match of the
// bottom name takes per entry.
func TestDeniedWalkEntryAgreesWithDeniedEntry(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1, Denylist: []string{"*.secret", "locked/", "/inside/a/**/deep.txt", "!keep.secret"}})
	for _, name := range []string{"inside/a/b/c/deep.txt", "inside/a/x.secret", "inside/a/keep.secret", "locked/y", "inside/locked/z/w", "inside/ok/fine.txt"} {
		if err := os.MkdirAll(filepath.Join(fx.root, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(fx.root, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	denied := 0
	for _, start := range []string{".", "inside", "inside/a"} {
		err := fx.fs.Walk(start, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			want := fx.fs.DeniedEntry(p)
			if got := fx.fs.DeniedWalkEntry(p, d); got != want {
				t.Errorf("from %s: DeniedWalkEntry(%s) = %v, DeniedEntry %v", start, p, got, want)
			}
			if want {
				denied++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if denied == 0 {
		t.Fatal("nothing was denied: the test checks nothing")
	}
}

// BenchmarkWalkDeep: a walk of a 2,500-level chain (a second directory at
// every level), sequential and parallel: every level below heldLevels is
// closed and reopened through "..".
func BenchmarkWalkDeep(b *testing.B) {
	fx := newFixture(b, Options{UID: -1, GID: -1})
	deepChain(b, filepath.Join(fx.root, "inside"), 2500, "a", "x")
	count := func(string, fs.DirEntry, error) error { return nil }
	b.Run("sequential", func(b *testing.B) {
		for b.Loop() {
			if err := fx.fs.Walk("inside", count); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		for b.Loop() {
			if err := fx.fs.WalkParallel(context.Background(), "inside", 2, count); err != nil {
				b.Fatal(err)
			}
		}
	})
}
