package chunkstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestGCRepacksMostlyDeadPack: a pack whose blobs are mostly of a deleted
// backup is rewritten with its live blobs only; the store shrinks to about
// the live backup, which reads back whole.
func TestGCRepacksMostlyDeadPack(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	keep, mixed, _ := crashStreams(t)
	if _, err := s.Write("srv", "mixed", bytes.NewReader(mixed)); err != nil {
		t.Fatal(err)
	}
	before, _ := s.b.List(context.Background(), "packs/")
	m, err := s.Write("srv", "keep", bytes.NewReader(keep))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("srv", "mixed"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.GC(); err != nil || n == 0 {
		t.Fatalf("GC removed %d blobs: %v", n, err)
	}
	after, _ := s.b.List(context.Background(), "packs/")
	for _, a := range after {
		for _, b := range before {
			if a.Name == b.Name {
				t.Fatalf("pack %s (mostly dead) was kept", a.Name)
			}
		}
	}
	if u, _ := s.Usage(); u > int64(len(keep))*11/10 {
		t.Fatalf("the store keeps %d bytes for a backup of %d", u, len(keep))
	}
	if got, err := io.ReadAll(s.Reader(m)); err != nil || !bytes.Equal(got, keep) {
		t.Fatalf("keep after the repack: %v", err)
	}
	// A new process reads the GC's index.
	s2, err := Open(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if d := s2.Check(m); d != nil || s2.rescans != 0 {
		t.Fatalf("after reopening: damage %v, %d rescans", d, s2.rescans)
	}
}

// TestLostIndexRebuiltFromPacks: with every index object gone (or
// damaged), the backups still read back (from the packs' trailers), and
// the next GC stores an index naming the packs again.
func TestLostIndexRebuiltFromPacks(t *testing.T) {
	for _, how := range []string{"lost", "damaged"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			data := tarOf(t, randomFiles(60, 300<<10, 5))
			m, err := s.Write("srv", "b", bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			idx, _ := filepath.Glob(filepath.Join(dir, "index", "*"))
			if len(idx) == 0 {
				t.Fatal("no index object")
			}
			for _, p := range idx {
				if how == "lost" {
					os.Remove(p)
				} else {
					os.WriteFile(p, []byte("WHIDX001 garbage garbage garbage garbage garbage garbage"), 0o600)
				}
			}
			s, err = Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := io.ReadAll(s.Reader(m)); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read without an index: %v", err)
			}
			if _, err := s.GC(); err != nil {
				t.Fatal(err)
			}
			s, err = Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if d := s.Check(m); d != nil || s.rescans != 0 {
				t.Fatalf("after the GC rebuilt the index: damage %v, %d rescans", d, s.rescans)
			}
		})
	}
}

// TestOldLayoutRefused: a repository of the one-file-per-chunk layout is
// refused with ErrOldLayout, by Open and OpenExisting, and left as it is.
func TestOldLayoutRefused(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "chunks", "ab"), 0o700)
	os.MkdirAll(filepath.Join(dir, "snapshots", "srv"), 0o700)
	os.WriteFile(filepath.Join(dir, "snapshots", "srv", "b.json"), []byte(`{"version":2}`), 0o600)
	if _, err := Open(dir); !errors.Is(err, ErrOldLayout) {
		t.Fatalf("Open: %v", err)
	}
	if _, err := OpenExisting(dir); !errors.Is(err, ErrOldLayout) {
		t.Fatalf("OpenExisting: %v", err)
	}
	os.Remove(filepath.Join(dir, "chunks", "ab"))
	os.Remove(filepath.Join(dir, "chunks"))
	b, _ := NewLocalBackend(dir)
	if _, err := OpenBackend(context.Background(), b); !errors.Is(err, ErrOldLayout) {
		t.Fatalf("OpenBackend with old manifests: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "config")); err == nil {
		t.Fatal("an old repository was marked as new")
	}
}

// TestLocalBackendNames: names that would leave the directory are refused.
func TestLocalBackendNames(t *testing.T) {
	b, err := NewLocalBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []string{"", "/etc/passwd", "../x", "a/../../x", "a//b", ".hidden", "a/./b"} {
		if err := b.Put(ctx, n, []byte("x")); err == nil {
			t.Errorf("Put(%q) accepted", n)
		}
	}
	if _, err := b.Get(ctx, "packs/none", 0, -1); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Get of a missing object: %v", err)
	}
	if err := b.Put(ctx, "a/b/c", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(ctx, "a/b/c", 1, 3); err != nil || string(got) != "ell" {
		t.Fatalf("ranged Get: %q %v", got, err)
	}
	if _, err := b.Get(ctx, "a/b/c", 3, 10); err == nil {
		t.Fatal("a Get past the end succeeded")
	}
}

// parsePack parses a whole pack's bytes (fuzzing and tests).
func parsePack(b []byte) ([]packEntry, error) {
	if len(b) < packTrailerLen {
		return nil, errors.New("short")
	}
	count, start, sum, err := parsePackTrailer(b[len(b)-packTrailerLen:], int64(len(b)))
	if err != nil {
		return nil, err
	}
	return parsePackEntries(b[start:len(b)-packTrailerLen], count, start, sum)
}

func FuzzParsePack(f *testing.F) {
	var p packer
	p.add(blobID{1}, encodeBlob([]byte("hello hello hello")), 17)
	p.add(blobID{2}, encodeBlob(bytes.Repeat([]byte{7}, 5000)), 5000)
	good, _ := p.finish()
	f.Add(good)
	f.Add(good[len(good)-packTrailerLen:])
	f.Add([]byte(packMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := parsePack(b)
		if err != nil {
			return
		}
		for _, e := range es {
			if int(e.Off)+int(e.Len) > len(b) {
				t.Fatalf("entry past the pack: %+v", e)
			}
			_, _ = decodeBlob(b[e.Off:e.Off+e.Len], int(e.Plain))
		}
	})
}

func FuzzParseIndex(f *testing.F) {
	f.Add(encodeIndex([]indexedPack{{ID: newID(), Entries: []packEntry{{Hash: blobID{3}, Off: 0, Len: 10, Plain: 20}}}}))
	f.Add(encodeIndex(nil))
	f.Add([]byte(indexMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := parseIndex(b)
		if err != nil {
			return
		}
		if again, err := parseIndex(encodeIndex(ps)); err != nil || len(again) != len(ps) {
			t.Fatalf("re-encoded index does not parse: %v", err)
		}
	})
}

func FuzzParseManifest(f *testing.F) {
	good, _ := json.Marshal(Manifest{Version: 3, Server: "s", Backup: "b", Size: 5,
		Chunks: []Chunk{{Hash: "aa" + string(bytes.Repeat([]byte("0"), 62)), Len: 5}},
		Files:  []File{{Path: "a", First: 0, Count: 1}}})
	f.Add(good)
	f.Add([]byte(`{"version":3,"chunks":[{"h":"x","n":-1}]}`))
	f.Add([]byte(`{"version":2}`))
	tm := testManifest()
	bin, err := encodeManifestBin(&tm, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(bin)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			return
		}
		for _, fl := range m.Files {
			m.Entry(fl)
		}
		_ = ChunkListSHA1(m.Chunks)
		// What parses encodes again (when it has a checksum, as every
		// manifest written has) and reads back the same.
		if len(m.SHA1) != 40 {
			return
		}
		m.Version = max(m.Version, manifestVersion)
		again, err := encodeManifestBin(&m, nil)
		if err != nil {
			t.Fatalf("a parsed manifest does not encode: %v", err)
		}
		if m2, err := ParseManifest(again); err != nil || !reflect.DeepEqual(m2, m) {
			t.Fatalf("a parsed manifest reads back as %+v (%v)", m2, err)
		}
	})
}

func FuzzDecodeBlob(f *testing.F) {
	f.Add(encodeBlob(bytes.Repeat([]byte("abc"), 100)), 300)
	f.Add(encodeBlob([]byte{1, 2, 3}), 3)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > maxChunk {
			return
		}
		if out, err := decodeBlob(b, n); err == nil && len(out) != n {
			t.Fatalf("decoded %d bytes, want %d", len(out), n)
		}
	})
}

// TestReaderBesideARepackingGC: a read-only store opened before another
// store repacked the backup's pack still reads the backup (it reads the
// index objects again when a pack is gone).
func TestReaderBesideARepackingGC(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	keep, mixed, _ := crashStreams(t)
	if _, err := s.Write("srv", "mixed", bytes.NewReader(mixed)); err != nil {
		t.Fatal(err)
	}
	m, err := s.Write("srv", "keep", bytes.NewReader(keep))
	if err != nil {
		t.Fatal(err)
	}
	ro, err := OpenExisting(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("srv", "mixed"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.GC(); err != nil || n == 0 {
		t.Fatalf("GC: %d %v", n, err)
	}
	if got, err := io.ReadAll(ro.Reader(m)); err != nil || !bytes.Equal(got, keep) {
		t.Fatalf("the reader beside the GC: %v", err)
	}
	if _, err := ro.GC(); err == nil {
		t.Fatal("a read-only store collected garbage")
	}
}

// TestFileIndexOfSegments: files written as segments (large ones in
// several pieces) and a reused one get the chunk ranges of exactly their
// bytes, although the chunks are cut on another goroutine.
func TestFileIndexOfSegments(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := randomFiles(6, 3<<20, 7) // each larger than a chunk's maximum
	for _, f := range randomFiles(30, 1000, 8) {
		files = append(files, [2]string{"small/" + f[0], f[1]})
	}
	write := func(id string, reuse map[string]PrevFile) (Manifest, []byte) {
		w := s.NewWriter("srv", id)
		defer w.Abort()
		var all []byte
		for _, f := range files {
			if p, ok := reuse[f[0]]; ok {
				first := w.Len()
				if !w.Reuse(p) {
					t.Fatal("reuse")
				}
				w.AddFile(File{Path: f[0], First: first, Count: w.Len() - first})
				all = append(all, f[1]...)
				continue
			}
			if err := w.Cut(); err != nil {
				t.Fatal(err)
			}
			first := w.Len()
			for b := []byte(f[1]); len(b) > 0; b = b[min(len(b), 100<<10):] {
				w.Write(b[:min(len(b), 100<<10)])
			}
			w.Cut()
			w.AddFile(File{Path: f[0], First: first, Count: w.Len() - first})
			all = append(all, f[1]...)
		}
		m, err := w.Commit()
		if err != nil {
			t.Fatal(err)
		}
		return m, all
	}
	check := func(m Manifest) {
		for i, f := range m.Files {
			cs, ok := m.Entry(f)
			if !ok {
				t.Fatalf("file %s: no entry", f.Path)
			}
			got, err := io.ReadAll(s.Reader(Manifest{Chunks: cs}))
			if err != nil || string(got) != files[i][1] {
				t.Fatalf("%s: file %s reads back %d bytes, want %d (%v)", m.Backup, f.Path, len(got), len(files[i][1]), err)
			}
		}
	}
	m1, all := write("b1", nil)
	if got, err := io.ReadAll(s.Reader(m1)); err != nil || !bytes.Equal(got, all) {
		t.Fatal("b1 reads back wrong")
	}
	check(m1)
	w := s.NewWriter("srv", "probe")
	prev := w.LatestFiles("srv")
	w.Abort()
	delete(prev, files[2][0])
	for path, p := range prev {
		if len(p.ids) != len(p.Chunks) {
			t.Fatalf("%s: reused without its chunks' decoded hashes", path)
		}
	}
	m2, _ := write("b2", prev)
	check(m2)
	checkCachedIDs(t, s, "srv", "b2")
}

// checkCachedIDs fails unless the cached latest backup of srv is backup
// with each chunk's decoded hash next to it (the pins of the next backup
// are taken from them).
func checkCachedIDs(t *testing.T, s *Store, srv, backup string) {
	t.Helper()
	el := s.latest.by[srv]
	if el == nil {
		t.Fatalf("no backup of %s cached", srv)
	}
	e := el.Value.(*latestEntry)
	if e.m.Backup != backup || len(e.ids) != len(e.m.Chunks) {
		t.Fatalf("%s is not cached with its chunks' hashes", backup)
	}
	for i, c := range e.m.Chunks {
		if h, err := parseHash(c.Hash); err != nil || h != e.ids[i] {
			t.Fatalf("%s: chunk %d is %s, its cached id %x", backup, i, c.Hash, e.ids[i])
		}
	}
}
