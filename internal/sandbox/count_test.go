package sandbox

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/wharf/wharf/internal/testutil/deeptree"
)

// walkCount counts the names below root as filepath.WalkDir sees them
// (links not followed): the reference for CountEntries.
func walkCount(t *testing.T, root string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCountEntriesMatchesTheTree: every name counts once (hard links once
// per name), links are counted and never followed (the fixture's links
// lead outside, to loops and nowhere), and nothing is changed.
func TestCountEntriesMatchesTheTree(t *testing.T) {
	fx := newFixture(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(fx.root, "many", "a", "b"), 0o755))
	for i := range 300 {
		must(os.WriteFile(filepath.Join(fx.root, "many", "f"+strconv.Itoa(i)), nil, 0o644))
	}
	must(os.Link(filepath.Join(fx.root, "top.txt"), filepath.Join(fx.root, "many", "a", "b", "hard")))
	before := fx.fs.Usage()
	got, err := fx.fs.CountEntries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := walkCount(t, fx.root); got != want {
		t.Fatalf("CountEntries = %d, want %d", got, want)
	}
	if fx.fs.Usage() != before {
		t.Fatal("CountEntries changed the cached usage")
	}
	if _, err := os.Stat(filepath.Join(fx.outside, "created")); err == nil {
		t.Fatal("a link was followed")
	}
}

// TestCountEntriesDeepTree: a chain of 2,500 nested directories (paths far
// beyond PATH_MAX) is counted whole, with few descriptors.
func TestCountEntriesDeepTree(t *testing.T) {
	fx := newFixture(t)
	base := walkCount(t, fx.root)
	if err := deeptree.ChainWithFile(filepath.Join(fx.root, "inside", "nested"), 2500, 1); err != nil {
		t.Fatal(err)
	}
	got, err := fx.fs.CountEntries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// 2,500 directories and the file at the bottom.
	if want := base + 2501; got != want {
		t.Fatalf("CountEntries = %d, want %d", got, want)
	}
}

// TestCountEntriesStopsOnCancel: a cancelled context ends the count.
func TestCountEntriesStopsOnCancel(t *testing.T) {
	fx := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := fx.fs.CountEntries(ctx); err == nil {
		t.Fatal("a cancelled count reported no error")
	}
}
