package chunkstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goldenDigestPerServer and goldenDigestNodeWide pin what the Writer stores for goldenBackups' input
// (issue 38 §4: the Writer split into stages stores the same manifests
// and packs, byte for byte, as the one it replaced). They were computed on
// main at 1d07135, before the split; a change to the chunking, the codec,
// the pack format or the manifest changes them on purpose, and says so.
const (
	goldenDigestPerServer = "a371f529cac5f14dd6d012da6cf3e3075341d0eb10a01a868580d02785d95713"
	goldenDigestNodeWide  = "6d7e50bfc4fc60e57078094528f8bc398f16c4c71f06400439f4827150488f03"
)

// fillRandom fills b from r, eight bytes at a time.
func fillRandom(r *rand.Rand, b []byte) {
	var w [8]byte
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(b[i:], w[:])
	}
}

// writeInPieces writes data to w in writes of odd sizes, so that the
// writer's batches end in the middle of its segments.
func writeInPieces(t *testing.T, w *Writer, data []byte) {
	t.Helper()
	for len(data) > 0 {
		n := min(len(data), 100<<10+7)
		if _, err := w.Write(data[:n]); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
}

// goldenBackups writes two backups of one server made of segments of
// every kind the writer handles (random, compressible, repeated, empty,
// small, larger than a pack, reused) and returns their manifests.
func goldenBackups(t *testing.T, s *Store) []Manifest {
	t.Helper()
	r := rand.New(rand.NewPCG(38, 4))
	big := make([]byte, 3<<20)
	fillRandom(r, big)
	huge := make([]byte, 17<<20)
	fillRandom(r, huge)
	text := []byte(strings.Repeat("the quick brown fox jumps over the lazy game server\n", 40<<10))
	small := make([][]byte, 300)
	for i := range small {
		small[i] = make([]byte, 100+r.IntN(3000))
		fillRandom(r, small[i])
	}
	file := func(w *Writer, path string, data []byte) {
		t.Helper()
		if err := w.Cut(); err != nil {
			t.Fatal(err)
		}
		first := w.Len()
		writeInPieces(t, w, data)
		if err := w.Cut(); err != nil {
			t.Fatal(err)
		}
		w.AddFile(File{Path: path, Size: int64(len(data)), First: first, Count: w.Len() - first})
	}
	// Another server's backup first: its chunks are skipped by srv's
	// backups under a node-wide policy only.
	w0 := s.NewWriter("other", "b0")
	defer w0.Abort()
	file(w0, "big", big[:2<<20])
	for i, b := range small[100:150] {
		file(w0, fmt.Sprintf("small/%d", i), b)
	}
	m0, err := w0.Commit()
	if err != nil {
		t.Fatal(err)
	}
	out := []Manifest{m0}
	w := s.NewWriter("srv", "b1")
	defer w.Abort()
	writeInPieces(t, w, []byte("a header before the files"))
	file(w, "big", big)
	file(w, "text", text)
	if err := w.Cut(); err != nil { // an empty segment
		t.Fatal(err)
	}
	file(w, "again", big[:1<<20])
	for i, b := range small {
		file(w, fmt.Sprintf("small/%d", i), b)
	}
	file(w, "huge", huge)
	writeInPieces(t, w, []byte("a trailer after the files"))
	m, err := w.Commit()
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, m)

	w2 := s.NewWriter("srv", "b2")
	defer w2.Abort()
	x := w2.LatestIndex("srv")
	if x == nil {
		t.Fatal("no index of the first backup")
	}
	for _, path := range []string{"big", "small/7", "huge", "small/8"} {
		p, ok := x.Find(path)
		if !ok {
			t.Fatalf("%s is not in the first backup's index", path)
		}
		first := w2.Len()
		if !w2.Reuse(p) {
			t.Fatalf("reusing %s", path)
		}
		k := p.File
		k.First, k.Count = first, w2.Len()-first
		w2.AddFile(k)
	}
	file(w2, "text", text[:len(text)/2])
	file(w2, "new", big[1<<20:])
	for i, b := range small[:50] {
		file(w2, fmt.Sprintf("small2/%d", i), b)
	}
	m, err = w2.Commit()
	if err != nil {
		t.Fatal(err)
	}
	return append(out, m)
}

// repositoryDigest is the SHA-256 of the manifests' contents (all but
// their creation time) and of the repository's packs (their bytes, in the
// order of their digests: a pack's name is random).
func repositoryDigest(t *testing.T, dir string, ms []Manifest) string {
	t.Helper()
	h := sha256.New()
	for _, m := range ms {
		fmt.Fprintf(h, "manifest %s %s v%d size %d sha1 %s bare %v\n", m.Server, m.Backup, m.Version, m.Size, m.SHA1, m.Bare)
		for _, c := range m.Chunks {
			fmt.Fprintf(h, "chunk %s %d\n", c.Hash, c.Len)
		}
		for _, f := range m.Files {
			fmt.Fprintf(h, "file %+v\n", f)
		}
	}
	var packs []string
	err := filepath.WalkDir(filepath.Join(dir, "packs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		packs = append(packs, fmt.Sprintf("pack %x %d\n", sum, len(b)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(packs)
	for _, p := range packs {
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// The writer stores the same manifests and packs for the same input and
// policy as the one before its split into stages (goldenDigestPerServer, goldenDigestNodeWide),
// and twice the same (a control: the digest is not of random names).
func TestWriterGolden(t *testing.T) {
	for _, nodeWide := range []bool{false, true} {
		t.Run(fmt.Sprintf("nodewide=%v", nodeWide), func(t *testing.T) {
			var got []string
			for range 2 {
				dir := t.TempDir()
				s, err := Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				p := DefaultPolicy()
				p.NodeWideDedup = nodeWide
				s.SetPolicy(p)
				ms := goldenBackups(t, s)
				s.Close()
				if len(ms[1].Chunks) < 300 || len(ms[2].Files) != 4+2+50 {
					t.Fatalf("the input is not what the test means: %d chunks, %d files", len(ms[0].Chunks), len(ms[1].Files))
				}
				got = append(got, repositoryDigest(t, dir, ms))
			}
			if got[0] != got[1] {
				t.Fatalf("two runs on the same input stored different repositories: %s, %s", got[0], got[1])
			}
			want := goldenDigestPerServer
			if nodeWide {
				want = goldenDigestNodeWide
			}
			if got[0] != want {
				t.Fatalf("repository digest %s, want %s (the writer stores other bytes than before)", got[0], want)
			}
		})
	}
}
