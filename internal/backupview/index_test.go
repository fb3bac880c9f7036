package backupview

import (
	"io/fs"
	"testing"
	"time"
)

// FuzzStoredIndex: a stored index is data of the repository (a damaged or
// hostile object): its header, table and blocks are decoded without a
// panic, and what a block decodes to is a valid listing.
func FuzzStoredIndex(f *testing.F) {
	mod := time.Unix(0, 1_700_000_000_123_456_789)
	t := &tree{nodes: map[string]*node{}, kids: map[string][]*node{}, created: mod}
	t.nodes["."] = &node{rel: ".", mode: fs.ModeDir | 0o755, mtime: mod, entry: -1}
	t.add(&node{rel: "a/b.txt", mode: 0o644, size: 5, mtime: mod, entry: 0, end: 1024})
	t.add(&node{rel: "l", mode: fs.ModeSymlink | 0o777, link: "../x", size: 4, mtime: mod, entry: -1})
	f.Add(encodeIndex(t, mod), "a")
	f.Add(encodeIndex(t, mod), ".")
	f.Add([]byte(indexMagic), "")
	f.Fuzz(func(t *testing.T, b []byte, rel string) {
		if len(b) < indexHeader {
			return
		}
		toff, tlen, ok := parseIndexHeader(b[:indexHeader], mod)
		if !ok || toff > int64(len(b)) {
			return
		}
		table := b[toff:min(int64(len(b)), toff+tlen)]
		d, found, ok := findIndexDir(table, tlen, toff, rel)
		if !ok || !found {
			return
		}
		if !d.info.IsDir() || d.off+d.len > toff {
			t.Fatalf("directory %q decoded as %+v", rel, d)
		}
		is, err := parseIndexBlock(b[d.off : d.off+d.len])
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
// the tree lists.
func TestStoredIndexRoundTrip(t *testing.T) {
	mod := time.Unix(0, 1_700_000_000_123_456_789)
	tr := &tree{nodes: map[string]*node{}, kids: map[string][]*node{}, created: mod}
	tr.nodes["."] = &node{rel: ".", mode: fs.ModeDir | 0o755, mtime: mod, entry: -1}
	tr.add(&node{rel: "a/b.txt", mode: 0o644, size: 5, mtime: mod, entry: 0, end: 1024})
	tr.add(&node{rel: "a/c", mode: fs.ModeSymlink | 0o777, link: "../x", size: 4, mtime: mod, entry: -1})
	b := encodeIndex(tr, mod)
	if _, _, ok := parseIndexHeader(b[:indexHeader], mod.Add(1)); ok {
		t.Fatal("an index of another manifest time was accepted")
	}
	toff, tlen, ok := parseIndexHeader(b[:indexHeader], mod)
	if !ok {
		t.Fatal("header refused")
	}
	d, found, ok := findIndexDir(b[toff:toff+tlen], tlen, toff, "a")
	if !ok || !found || !d.info.IsDir() {
		t.Fatalf("a: %+v %v %v", d, found, ok)
	}
	is, err := parseIndexBlock(b[d.off : d.off+d.len])
	if err != nil || len(is) != 2 || is[0].Name() != "b.txt" || is[0].Size() != 5 || is[1].Target != "../x" || is[1].Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("a lists %+v, %v", is, err)
	}
	if _, found, ok := findIndexDir(b[toff:toff+tlen], tlen, toff, "a/b.txt"); !ok || found {
		t.Fatal("a file found as a directory")
	}
}
