package chunkstore

import (
	"archive/tar"
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// tarOf builds a tar of files name→content, in name order.
func tarOf(t *testing.T, files [][2]string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f[0], Mode: 0o644, Size: int64(len(f[1])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func randomFiles(n, size int, seed uint64) [][2]string {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([][2]string, n)
	for i := range out {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		out[i] = [2]string{"f" + string(rune('a'+i%26)) + string(rune('a'+i/26)), string(b)}
	}
	return out
}

func TestWriteReadDedupGC(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := randomFiles(50, 256<<10, 1)
	t1 := tarOf(t, files)
	m1, err := s.Write("srv", "b1", bytes.NewReader(t1))
	if err != nil {
		t.Fatal(err)
	}
	u1, _ := s.Usage()
	files[10][1] = strings.Repeat("x", 1000) + files[10][1][1000:]
	t2 := tarOf(t, files)
	m2, err := s.Write("srv", "b2", bytes.NewReader(t2))
	if err != nil {
		t.Fatal(err)
	}
	u2, _ := s.Usage()
	for _, m := range []Manifest{m1, m2} {
		// As stored (the checksum is written into the encoded manifest last).
		got, err := s.Manifest("srv", m.Backup)
		if err != nil || got.SHA1 != m.SHA1 || got.SHA1 != ChunkListSHA1(m.Chunks) {
			t.Fatalf("stored manifest of %s: sha1 %q, returned %q (%v)", m.Backup, got.SHA1, m.SHA1, err)
		}
	}
	if grow := u2 - u1; grow > int64(len(t1))/4 {
		t.Fatalf("second backup grew the store by %d of %d bytes: no deduplication", grow, len(t1))
	}
	for _, c := range []struct {
		m    Manifest
		want []byte
	}{{m1, t1}, {m2, t2}} {
		got, err := io.ReadAll(s.Reader(c.m))
		if err != nil || !bytes.Equal(got, c.want) {
			t.Fatalf("read back %s: err %v, equal %v", c.m.Backup, err, bytes.Equal(got, c.want))
		}
	}
	if err := s.Delete("srv", "b1"); err != nil {
		t.Fatal(err)
	}
	// b1's pack is mostly b2's too: it stays whole (not worth a repack).
	if _, err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(s.Reader(m2)); err != nil || !bytes.Equal(got, t2) {
		t.Fatalf("backup 2 after GC: %v", err)
	}
	if _, err := s.Manifest("srv", "b1"); err != ErrNotFound {
		t.Fatalf("deleted backup: %v", err)
	}
	if err := s.Delete("srv", "b2"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.GC(); err != nil || n == 0 {
		t.Fatalf("GC removed %d blobs, err %v; want some", n, err)
	}
	if u, _ := s.Usage(); u > 4<<10 {
		t.Fatalf("an empty repository uses %d bytes", u)
	}
}

func TestCorruptChunkNamesFiles(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := randomFiles(20, 512<<10, 2)
	m, err := s.Write("srv", "b", bytes.NewReader(tarOf(t, files)))
	if err != nil {
		t.Fatal(err)
	}
	if d := s.Check(m); d != nil {
		t.Fatalf("whole backup reported damaged: %+v", d)
	}
	damageBlob(t, s, m.Chunks[len(m.Chunks)/2])
	if _, err := io.ReadAll(s.Reader(m)); err == nil {
		t.Fatal("reading a backup with a corrupt chunk succeeded")
	}
	d := s.Check(m)
	if d == nil || len(d.Files) == 0 || len(d.Files) > 4 {
		t.Fatalf("damage = %+v; want a few files named", d)
	}
}

// damageBlob flips a byte in the middle of c's blob in its pack file.
func damageBlob(t *testing.T, s *Store, c Chunk) {
	t.Helper()
	h, err := parseHash(c.Hash)
	if err != nil {
		t.Fatal(err)
	}
	loc, ok := s.lookup(h)
	if !ok {
		t.Fatalf("chunk %s is not indexed", c.Hash)
	}
	f, err := os.OpenFile(filepath.Join(s.Dir(), filepath.FromSlash(packName(loc.pack))), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	at := int64(loc.off) + int64(loc.n)/2
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

// TestGCConcurrentWithBackups runs collections without pause while backups
// that share chunks with a deleted backup are written: every backup
// written reads back whole.
func TestGCConcurrentWithBackups(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := randomFiles(16, 256<<10, 3)
	data := tarOf(t, files)
	if _, err := s.Write("srv", "old", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("srv", "old"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	gcs := 0
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			if _, err := s.GC(); err != nil {
				t.Error(err)
				return
			}
			gcs++
		}
	}()
	var ms []Manifest
	for i := range 8 {
		m, err := s.Write("srv", "b"+string(rune('0'+i)), bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
		// Delete some, so the next one reuses chunks GC may be removing.
		if i%2 == 0 {
			_ = s.Delete("srv", m.Backup)
			ms = ms[:len(ms)-1]
		}
	}
	<-done
	for _, m := range ms {
		if d := s.Check(m); d != nil {
			t.Fatalf("backup %s damaged after concurrent GCs (%d GCs): %v", m.Backup, gcs, d.Chunks[0])
		}
	}
}

// TestGCKeepsABackupFinishedDuringIt writes a backup that reuses the chunks
// of a deleted one after the GC read the manifests and before it removes
// chunks: the new backup must keep them.
func TestGCKeepsABackupFinishedDuringIt(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := tarOf(t, randomFiles(8, 256<<10, 4))
	if _, err := s.Write("srv", "old", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("srv", "old"); err != nil {
		t.Fatal(err)
	}
	var m Manifest
	s.afterMark = func() {
		var err error
		if m, err = s.Write("srv", "new", bytes.NewReader(data)); err != nil {
			t.Error(err)
		}
	}
	if _, err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if d := s.Check(m); d != nil {
		t.Fatalf("the backup written during the GC lost chunks: %v", d.Chunks[0])
	}
}

// A committed backup's pins are dropped in the background; a GC started
// right after the commit waits for them, so it sees no pin left.
func TestGCWaitsForACommittedBackupsPins(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := tarOf(t, randomFiles(20, 64<<10, 3))
	if _, err := s.Write("srv", "b0", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	left := -1
	s.afterMark = func() {
		s.mu.Lock()
		left = len(s.pins) + len(s.listPins)
		s.mu.Unlock()
	}
	for i := range 10 {
		w := s.NewWriter("srv", "b"+strconv.Itoa(i+1))
		w.LatestIndex("srv") // pins the previous backup's chunks
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GC(); err != nil {
			t.Fatal(err)
		}
		if left != 0 {
			t.Fatalf("backup %d: GC marked with %d pins left", i+1, left)
		}
	}
}
