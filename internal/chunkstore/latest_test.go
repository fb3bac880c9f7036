package chunkstore

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// writeIndexed writes files as backup id of srv, each file a segment in
// the file index, and commits it on s.
func writeIndexed(t *testing.T, s *Store, srv, id string, files [][2]string) Manifest {
	t.Helper()
	w := s.NewWriter(srv, id)
	defer w.Abort()
	for i, f := range files {
		if err := w.Cut(); err != nil {
			t.Fatal(err)
		}
		first := w.Len()
		w.Write([]byte(f[1]))
		w.Cut()
		w.AddFile(File{Path: f[0], Size: int64(len(f[1])), Ino: uint64(i), SHA1: "00", First: first, Count: w.Len() - first})
	}
	m, err := w.Commit()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// latestOf is LatestFiles of srv in s, from a writer dropped after.
func latestOf(s *Store, srv string) map[string]PrevFile {
	w := s.NewWriter(srv, "probe")
	defer w.Abort()
	return w.LatestFiles(srv)
}

// TestLatestFilesCachedEqualsParsed: the file index LatestFiles gives from
// the manifest this Store committed (kept in memory) is the one a fresh
// Store parses from the manifest object; a deleted or overwritten latest
// backup is not served from memory.
func TestLatestFilesCachedEqualsParsed(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := randomFiles(3, 2<<20, 11)
	for _, f := range randomFiles(40, 700, 12) {
		files = append(files, [2]string{"small/" + f[0], f[1]})
	}
	writeIndexed(t, s, "srv", "b1", files)
	writeIndexed(t, s, "other", "o1", files[:5])
	cached := latestOf(s, "srv")
	if s.latest.get("srv", "b1", -1) != nil || s.latest.by["srv"] == nil {
		t.Fatal("the committed manifest is not kept (or get ignores the size)")
	}
	fresh, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	parsed := latestOf(fresh, "srv")
	// Only the cached index's chunks skip the commit's check.
	for path, p := range cached {
		if !p.checked || parsed[path].checked {
			t.Fatalf("%s: checked %v cached, %v parsed", path, p.checked, parsed[path].checked)
		}
		p.checked = false
		cached[path] = p
	}
	if len(parsed) != len(files) || !reflect.DeepEqual(cached, parsed) {
		t.Fatalf("cached file index (%d files) differs from the parsed one (%d files)", len(cached), len(parsed))
	}
	// Another process (here: another Store) overwrites b1 with fewer files.
	writeIndexed(t, fresh, "srv", "b1", files[:4])
	if got := latestOf(s, "srv"); len(got) != 4 {
		t.Fatalf("after b1 was rewritten elsewhere: %d files, want 4", len(got))
	}
	// b1 is deleted: no file index, although b1 was cached.
	writeIndexed(t, s, "srv", "b1", files)
	if err := s.Delete("srv", "b1"); err != nil {
		t.Fatal(err)
	}
	if got := latestOf(s, "srv"); got != nil {
		t.Fatalf("after b1's deletion: %d files", len(got))
	}
	if got := latestOf(s, "other"); len(got) != 5 {
		t.Fatalf("other server: %d files, want 5", len(got))
	}
}

// TestLatestCacheBounded: the cache drops the least recently used
// manifests beyond latestCacheFiles files, and never keeps a larger one.
func TestLatestCacheBounded(t *testing.T) {
	var c latestCache
	entry := func(server string, files int) *latestEntry {
		return &latestEntry{server: server, m: Manifest{Backup: "b", Files: make([]File, files)}}
	}
	c.put(entry("a", latestCacheFiles/2))
	c.put(entry("b", latestCacheFiles/2))
	if c.get("a", "b", 0) == nil { // a is now the most recently used
		t.Fatal("a not cached")
	}
	c.put(entry("c", 10))
	if c.get("b", "b", 0) != nil || c.get("a", "b", 0) == nil || c.get("c", "b", 0) == nil {
		t.Fatal("the least recently used manifest (b) was not the one dropped")
	}
	if c.files != latestCacheFiles/2+10 {
		t.Fatalf("files counted %d", c.files)
	}
	c.put(entry("a", latestCacheFiles+1))
	if c.get("a", "b", 0) != nil || c.files != 10 {
		t.Fatalf("a manifest over the bound is cached (files %d)", c.files)
	}
}

// TestFileIndexFind: Find gives what the map by path gives, whether the
// paths come in the index's order, with new files between them, with
// files left out, or in another order.
func TestFileIndexFind(t *testing.T) {
	m := &Manifest{Chunks: make([]Chunk, 10)}
	for i, p := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		m.Files = append(m.Files, File{Path: p, First: i, Count: 1})
	}
	m.Files[5].Count = 99 // out of bounds: not reusable
	want := func(p string) (int, bool) {
		for _, f := range m.Files {
			if f.Path == p && f.Path != "f" {
				return f.First, true
			}
		}
		return 0, false
	}
	for _, walk := range [][]string{
		{"a", "b", "c", "d", "e", "f", "g"},
		{"0", "a", "aa", "b", "c", "cc", "d", "e", "f", "g", "h"},
		{"b", "d", "g"},
		{"g", "a", "e", "c", "x", "b"},
		{"a", "a", "b"},
	} {
		x := &FileIndex{m: m}
		for _, p := range walk {
			got, ok := x.Find(p)
			first, wok := want(p)
			if ok != wok || (ok && (got.Path != p || got.First != first || len(got.Chunks) != 1)) {
				t.Fatalf("walk %v: Find(%q) = %+v %v, want first %d %v", walk, p, got, ok, first, wok)
			}
		}
	}
	var none *FileIndex
	if _, ok := none.Find("a"); ok {
		t.Fatal("a nil index finds a file")
	}
}

// TestCheckIndexed: a manifest naming a blob neither indexed nor the
// backup's own is refused; one of the backup's own is not.
func TestCheckIndexed(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := writeIndexed(t, s, "srv", "b1", randomFiles(2, 1000, 3))
	h := blobID{1, 2, 3}
	m.Chunks = append(m.Chunks, Chunk{Hash: hex.EncodeToString(h[:]), Len: 1})
	if _, err := s.checkIndexed(m, nil, nil, nil); err == nil {
		t.Fatal("a manifest naming an unknown blob passed")
	}
	ids, err := s.checkIndexed(m, nil, nil, map[blobID]struct{}{h: {}})
	if err != nil || len(ids) != len(m.Chunks) || ids[len(ids)-1] != h {
		t.Fatalf("with the blob the backup's own: %v", err)
	}
	// The hashes the writer knows decoded are checked the same way.
	if _, err := s.checkIndexed(m, ids, nil, nil); err == nil {
		t.Fatal("a manifest naming an unknown blob passed with its hashes known")
	}
}

// TestChunkListSHA1: the checksum is the SHA-1 of the chunk lines.
func TestChunkListSHA1(t *testing.T) {
	cs := []Chunk{{Hash: "aa", Len: 1}, {Hash: "bb", Len: 1 << 40}}
	sum := sha1.Sum([]byte("aa 1\nbb 1099511627776\n"))
	if got := ChunkListSHA1(cs); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("ChunkListSHA1 = %s", got)
	}
	// Lines across the 32 KiB batches it hashes, and a hash longer than one.
	cs, lines := nil, ""
	for i := range 3000 {
		c := Chunk{Hash: strings.Repeat(string(rune('a'+i%26)), 1+i%97), Len: int64(i)}
		if i == 1500 {
			c.Hash = strings.Repeat("x", 40<<10)
		}
		cs = append(cs, c)
		lines += c.Hash + " " + strconv.FormatInt(c.Len, 10) + "\n"
	}
	sum = sha1.Sum([]byte(lines))
	if got := ChunkListSHA1(cs); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("ChunkListSHA1 of 3,000 chunks = %s", got)
	}
}

// TestCheckIndexedSkipsCheckedRanges: the chunks in the ranges skipped
// are not looked up, every other one is.
func TestCheckIndexedSkipsCheckedRanges(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := writeIndexed(t, s, "srv", "b1", randomFiles(4, 1000, 3))
	n := len(m.Chunks)
	unknown := blobID{9, 9, 9}
	m.Chunks = append(m.Chunks, Chunk{Hash: hex.EncodeToString(unknown[:]), Len: 1}, m.Chunks[0])
	for _, c := range []struct {
		skip [][2]int
		ok   bool
	}{
		{nil, false}, {[][2]int{{0, n}}, false}, {[][2]int{{n + 1, n + 2}}, false},
		{[][2]int{{n, n + 1}}, true}, {[][2]int{{0, 1}, {n, n + 2}}, true},
	} {
		if _, err := s.checkIndexed(m, nil, c.skip, nil); (err == nil) != c.ok {
			t.Fatalf("skipping %v: %v", c.skip, err)
		}
	}
}

// TestReuseFromAParsedManifestIsChecked: a backup reusing the chunks of a
// manifest read from the backend (here: after a restart, with the index
// objects lost) checks them, finding them in the packs; one reusing the
// manifest this Store committed skips the check for them.
func TestReuseFromAParsedManifestIsChecked(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := randomFiles(20, 40<<10, 21)
	writeIndexed(t, s, "srv", "b1", files)
	idx, _ := filepath.Glob(filepath.Join(dir, "index", "*"))
	for _, p := range idx {
		os.Remove(p)
	}
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	reuseAll := func(id string) (*Writer, Manifest) {
		w := s.NewWriter("srv", id)
		defer w.Abort()
		x := w.LatestIndex("srv")
		for _, f := range files {
			p, ok := x.Find(f[0])
			if !ok {
				t.Fatalf("%s: %s not in the previous backup", id, f[0])
			}
			first := w.Len()
			if !w.Reuse(p) {
				t.Fatal("reuse")
			}
			w.AddFile(File{Path: f[0], Size: p.Size, First: first, Count: w.Len() - first})
		}
		m, err := w.Commit()
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return w, m
	}
	w, m := reuseAll("b2")
	if s.rescans == 0 || len(w.app.res.checked) != 0 {
		t.Fatalf("reusing a parsed manifest: %d rescans, checked ranges %v", s.rescans, w.app.res.checked)
	}
	if d := s.Check(m); d != nil {
		t.Fatalf("b2: %v", d.Chunks[0])
	}
	w, m = reuseAll("b3")
	if len(w.app.res.checked) != 1 || w.app.res.checked[0] != [2]int{0, len(m.Chunks)} {
		t.Fatalf("reusing the committed manifest: checked ranges %v of %d chunks", w.app.res.checked, len(m.Chunks))
	}
}
