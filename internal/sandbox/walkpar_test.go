package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// collect returns what a walk reported: "path kind" lines, sorted.
func collect(t *testing.T, walk func(fs.WalkDirFunc) error) []string {
	t.Helper()
	var mu sync.Mutex
	var out []string
	err := walk(func(p string, d fs.DirEntry, err error) error {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			out = append(out, p+" error")
			return nil
		}
		out = append(out, fmt.Sprintf("%s %v", p, d.Type()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestWalkParallelReportsWhatWalkReports(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1})
	for i := range 40 {
		d := filepath.Join(fx.root, "tree", fmt.Sprintf("d%02d", i%7), fmt.Sprintf("s%d", i%3))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, start := range []string{".", "tree", "inside", "top.txt"} {
		seq := collect(t, func(fn fs.WalkDirFunc) error { return fx.fs.Walk(start, fn) })
		par := collect(t, func(fn fs.WalkDirFunc) error {
			return fx.fs.WalkParallel(context.Background(), start, 4, fn)
		})
		if strings.Join(seq, "\n") != strings.Join(par, "\n") {
			t.Errorf("from %s: parallel walk\n%s\nwant\n%s", start, strings.Join(par, "\n"), strings.Join(seq, "\n"))
		}
	}
}

func TestWalkParallelReportsDirectoriesBeforeTheirEntries(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1})
	if err := os.MkdirAll(filepath.Join(fx.root, "a/b/c/d"), 0o755); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{"": true, ".": true}
	err := fx.fs.WalkParallel(context.Background(), ".", 3, func(p string, d fs.DirEntry, err error) error {
		mu.Lock()
		defer mu.Unlock()
		if parent := filepath.Dir(p); p != "." && !seen[parent] {
			return fmt.Errorf("%s reported before its directory %s", p, parent)
		}
		seen[p] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestWalkParallelSkipsAndStops(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1})
	got := collect(t, func(fn fs.WalkDirFunc) error {
		return fx.fs.WalkParallel(context.Background(), ".", 2, func(p string, d fs.DirEntry, err error) error {
			if p == "inside" {
				return fs.SkipDir
			}
			return fn(p, d, err)
		})
	})
	for _, l := range got {
		if strings.HasPrefix(l, "inside/") {
			t.Errorf("SkipDir did not skip: %s", l)
		}
	}
	boom := errors.New("boom")
	err := fx.fs.WalkParallel(context.Background(), ".", 2, func(p string, d fs.DirEntry, err error) error {
		if p == "inside/file.txt" {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error = %v, want boom", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := fx.fs.WalkParallel(ctx, ".", 2, func(string, fs.DirEntry, error) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled walk: %v", err)
	}
}
