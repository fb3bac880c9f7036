package chunkstore

import (
	"crypto/sha1"
	"encoding/hex"
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
	if _, err := s.checkIndexed(m, nil, nil); err == nil {
		t.Fatal("a manifest naming an unknown blob passed")
	}
	ids, err := s.checkIndexed(m, nil, map[blobID]struct{}{h: {}})
	if err != nil || len(ids) != len(m.Chunks) || ids[len(ids)-1] != h {
		t.Fatalf("with the blob the backup's own: %v", err)
	}
	// The hashes the writer knows decoded are checked the same way.
	if _, err := s.checkIndexed(m, ids, nil); err == nil {
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
