package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// RemoveEntry removes walked entries as they are: a directory with its
// links to outside, a link to a directory outside, a link to a file
// outside; nothing outside changes and the usage stays right.
func TestRemoveEntry(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1})
	before := fx.snapshot(t)
	ctx := context.Background()
	if _, err := fx.fs.RefreshUsage(ctx); err != nil {
		t.Fatal(err)
	}
	remove := map[string]bool{"inside": true, "dirlink": true, "filelink": true, "loop1": true}
	err := fx.fs.Walk(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !remove[p] {
			return err
		}
		if err := fx.fs.RemoveEntry(ctx, p, d); err != nil {
			t.Errorf("remove %s: %v", p, err)
		}
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range remove {
		if _, err := os.Lstat(filepath.Join(fx.root, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(fx.root, "top.txt")); err != nil {
		t.Fatalf("an entry not removed is gone: %v", err)
	}
	if diff := cmp.Diff(before, fx.snapshot(t)); diff != "" {
		t.Fatalf("outside changed (-before +after):\n%s", diff)
	}
	charged := fx.fs.Usage()
	real, err := fx.fs.RefreshUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if charged != real {
		t.Fatalf("usage after the removals %d, on disk %d", charged, real)
	}
}

// A directory swapped for a link to outside between its listing and its
// removal: the link is removed, the directory it points to is not touched.
func TestRemoveEntryOfADirectorySwappedForALink(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1})
	before := fx.snapshot(t)
	err := fx.fs.Walk(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p != "inside" {
			return err
		}
		must(t, os.Rename(filepath.Join(fx.root, "inside"), filepath.Join(fx.root, "moved")))
		must(t, os.Symlink(fx.outside, filepath.Join(fx.root, "inside")))
		if err := fx.fs.RemoveEntry(context.Background(), p, d); err != nil && !Vanished(err) {
			t.Errorf("remove: %v", err)
		}
		return fs.SkipDir
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, fx.snapshot(t)); diff != "" {
		t.Fatalf("outside changed (-before +after):\n%s", diff)
	}
}

// Deeper than PATH_MAX, below the levels whose descriptors the walk keeps:
// the side directory of every level is removed through its parent's
// descriptor.
func TestRemoveEntryInADeepTree(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1})
	const depth = 2500
	deepChain(t, filepath.Join(fx.root, "inside"), depth, "x", "bottom")
	removed := 0
	err := fx.fs.Walk("inside", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(p, "/x") {
			return err
		}
		if err := fx.fs.RemoveEntry(context.Background(), p, d); err != nil {
			return err
		}
		removed++
		return fs.SkipDir
	})
	if err != nil {
		t.Fatal(err)
	}
	if removed != depth {
		t.Fatalf("removed %d side directories, want %d", removed, depth)
	}
	left := 0
	err = fx.fs.Walk("inside", func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, "/x") {
			left++
		}
		return err
	})
	if err != nil || left != 0 {
		t.Fatalf("%d side directories left (%v)", left, err)
	}
}

// A denied entry, or a directory holding one, is not removed.
func TestRemoveEntryRefusesDenied(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1, Denylist: []string{"*.secret"}})
	must(t, os.WriteFile(filepath.Join(fx.root, "a.secret"), []byte("x"), 0o644))
	must(t, os.WriteFile(filepath.Join(fx.root, "inside", "nested", "b.secret"), []byte("x"), 0o644))
	tried := 0
	err := fx.fs.Walk(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || (p != "a.secret" && p != "inside") {
			return err
		}
		tried++
		if err := fx.fs.RemoveEntry(context.Background(), p, d); !errors.Is(err, ErrDenied) {
			t.Errorf("remove %s: %v, want ErrDenied", p, err)
		}
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil || tried != 2 {
		t.Fatalf("tried %d removals (%v), want 2", tried, err)
	}
	for _, p := range []string{"a.secret", "inside/nested/b.secret"} {
		if _, err := os.Lstat(filepath.Join(fx.root, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
