package backupview

import (
	"io/fs"
	"testing"
	"time"
)

func smallTree(mod time.Time) *tree {
	t := &tree{nodes: map[string]*node{}, kids: map[string][]*node{}, created: mod}
	t.nodes["."] = &node{rel: ".", mode: fs.ModeDir | 0o755, mtime: mod, entry: -1}
	t.add(&node{rel: "a/b.txt", mode: 0o644, size: 5, mtime: mod, entry: 0, end: 1024})
	t.add(&node{rel: "a/c", mode: fs.ModeSymlink | 0o777, link: "../x", size: 4, mtime: mod, entry: -1})
	return t
}

// FuzzStoredIndex: a stored index is data of the repository (a damaged or
// hostile object): its table and listings are decoded without a panic,
// and what they decode to is a directory and a valid listing.
func FuzzStoredIndex(f *testing.F) {
	mod := time.Unix(0, 1_700_000_000_123_456_789)
	table, dirs := encodeIndex(smallTree(mod), mod)
	f.Add(table, dirs, "a")
	f.Add(table, dirs, ".")
	f.Add([]byte(indexMagic), []byte{}, "")
	f.Fuzz(func(t *testing.T, table, dirs []byte, rel string) {
		d, found, ok := findIndexDir(table, mod, rel)
		if !ok || !found {
			return
		}
		if !d.info.IsDir() || d.off < 0 || d.len < 0 {
			t.Fatalf("directory %q decoded as %+v", rel, d)
		}
		if d.off+d.len > int64(len(dirs)) {
			return
		}
		is, err := parseIndexBlock(dirs[d.off : d.off+d.len])
		if err != nil {
			return
		}
		for _, i := range is {
			if i.Name() == "" || i.Name() == "." || i.Name() == ".." {
				t.Fatalf("entry %q", i.Name())
			}
		}
	})
}

// TestStoredIndexRoundTrip: the encoded index of a small tree lists what
// the tree lists, and only for its manifest's time.
func TestStoredIndexRoundTrip(t *testing.T) {
	mod := time.Unix(0, 1_700_000_000_123_456_789)
	table, dirs := encodeIndex(smallTree(mod), mod)
	if _, _, ok := findIndexDir(table, mod.Add(1), "a"); ok {
		t.Fatal("an index of another manifest time was accepted")
	}
	d, found, ok := findIndexDir(table, mod, "a")
	if !ok || !found || !d.info.IsDir() {
		t.Fatalf("a: %+v %v %v", d, found, ok)
	}
	is, err := parseIndexBlock(dirs[d.off : d.off+d.len])
	if err != nil || len(is) != 2 || is[0].Name() != "b.txt" || is[0].Size() != 5 || is[1].Target != "../x" || is[1].Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("a lists %+v, %v", is, err)
	}
	if _, found, ok := findIndexDir(table, mod, "a/b.txt"); !ok || found {
		t.Fatal("a file found as a directory")
	}
}

// TestTreeGivesUpPastItsLimit: a tree built with a limit says so once it
// holds more entries (buildTreeAtMost then stops with errTooManyEntries),
// and one without a limit never does.
func TestTreeGivesUpPastItsLimit(t *testing.T) {
	mod := time.Unix(0, 0)
	limited := &tree{nodes: map[string]*node{}, kids: map[string][]*node{}, created: mod, limit: 3}
	free := &tree{nodes: map[string]*node{}, kids: map[string][]*node{}, created: mod}
	for _, tr := range []*tree{limited, free} {
		tr.nodes["."] = &node{rel: ".", mode: fs.ModeDir | 0o755, mtime: mod, entry: -1}
		tr.add(&node{rel: "a", mode: 0o644, mtime: mod, entry: -1})
		tr.add(&node{rel: "b", mode: 0o644, mtime: mod, entry: -1})
	}
	if limited.over {
		t.Fatal("3 entries (with the root) are not over a limit of 3")
	}
	limited.add(&node{rel: "d/e", mode: 0o644, mtime: mod, entry: -1}) // and its directory d
	free.add(&node{rel: "d/e", mode: 0o644, mtime: mod, entry: -1})
	if !limited.over {
		t.Fatal("5 entries are over a limit of 3")
	}
	if free.over {
		t.Fatal("a tree without a limit is never over it")
	}
}
