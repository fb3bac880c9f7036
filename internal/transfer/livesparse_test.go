package transfer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// sparseLinkTree builds a tree with a sparse file of size bytes holding
// 64 KiB of data at its start, middle and end, and a 256 KiB file with 7
// further names (two directories).
func sparseLinkTree(tb testing.TB, size int64) string {
	tb.Helper()
	src := tb.TempDir()
	f, err := os.Create(filepath.Join(src, "sparse.img"))
	must(tb, err)
	data := bytes.Repeat([]byte("data"), 16<<10)
	for _, off := range []int64{0, size / 2, size - int64(len(data))} {
		_, err := f.WriteAt(data, off)
		must(tb, err)
	}
	must(tb, f.Close())
	must(tb, os.MkdirAll(filepath.Join(src, "a", "b"), 0o755))
	must(tb, os.WriteFile(filepath.Join(src, "a", "first.bin"), bytes.Repeat([]byte("link"), 64<<10), 0o640))
	for i := range 7 {
		dir := "a"
		if i%2 == 1 {
			dir = "a/b"
		}
		must(tb, os.Link(filepath.Join(src, "a", "first.bin"), filepath.Join(src, dir, "name"+string(rune('0'+i)))))
	}
	return src
}

func statOf(tb testing.TB, p string) *syscall.Stat_t {
	tb.Helper()
	fi, err := os.Lstat(p)
	must(tb, err)
	return fi.Sys().(*syscall.Stat_t)
}

// Version 4 carries holes as holes and hard links as links: the stream
// holds the data once, the target allocates about the data and its names
// share one inode. The control: the same tree in version 3 sends every
// byte of the sparse file and every name's content.
func TestLiveWireV4CarriesHolesAndHardLinks(t *testing.T) {
	const size = 32 << 20
	src := sparseLinkTree(t, size)
	if st := statOf(t, filepath.Join(src, "sparse.img")); st.Blocks*512 >= size/2 {
		t.Skip("the file system here does not make sparse files")
	}
	var v3, v4 []byte
	for _, version := range []int{3, 4} {
		ls := newLiveSender(context.Background(), tree.Open(t, src), version, "")
		stream := encodeLiveWith(t, ls, "none")
		ar := newArena(t)
		if _, err := ar.applyVersion(t, bytes.NewReader(stream), version); err != nil {
			t.Fatalf("version %d: %v", version, err)
		}
		want, _ := tree.Snapshot(src)
		got, _ := tree.Snapshot(ar.root)
		if d := tree.Diff(want, got); d != "" {
			t.Fatalf("version %d: %s", version, d)
		}
		ar.checkOutside(t)
		sp := statOf(t, filepath.Join(ar.root, "sparse.img"))
		first := statOf(t, filepath.Join(ar.root, "a", "first.bin"))
		t.Logf("version %d: %d bytes on the wire; sparse.img allocates %d KiB; first.bin has %d names; %d sparse, %d links sent",
			version, len(stream), sp.Blocks/2, first.Nlink, ls.sparse.Load(), ls.links.Load())
		switch version {
		case 3:
			v3 = stream
			if len(stream) < size {
				t.Fatalf("version 3 sent %d bytes, want the whole sparse file (the control)", len(stream))
			}
			if first.Nlink != 1 {
				t.Errorf("version 3: first.bin has %d names, want 1 (copies)", first.Nlink)
			}
		case 4:
			v4 = stream
			if len(stream) > 2<<20 {
				t.Errorf("version 4 sent %d bytes, want about the data (448 KiB)", len(stream))
			}
			if sp.Blocks*512 > 1<<20 {
				t.Errorf("version 4: sparse.img allocates %d bytes, want about its 192 KiB of data", sp.Blocks*512)
			}
			if first.Nlink != 8 {
				t.Errorf("version 4: first.bin has %d names, want 8", first.Nlink)
			}
			for _, n := range []string{"a/name0", "a/b/name1", "a/b/name5"} {
				if st := statOf(t, filepath.Join(ar.root, n)); st.Ino != first.Ino {
					t.Errorf("version 4: %s is inode %d, first.bin %d", n, st.Ino, first.Ino)
				}
			}
		}
	}
	// A version-3 target refuses the new records.
	if _, err := newArena(t).applyVersion(t, bytes.NewReader(v4), 3); !errors.Is(err, errBadStream) {
		t.Errorf("a version-4 stream applied as version 3: %v, want a bad stream", err)
	}
	_ = v3
}

// A file rewritten in a later pass while it has further names gets a new
// inode on the target: the other names keep what they held (as on the
// source, where a new content under one name means a new file there too,
// or both names change and both are sent).
func TestLiveWireV4NeverWritesThroughALink(t *testing.T) {
	sum := func(s string) []byte {
		h := newContentHash()
		_, _ = h.Write([]byte(s))
		b := h.Sum128().Bytes()
		return b[:]
	}
	stream := newWire().pass(1, phaseOnline).file("a", "one").rec(recHardLink, "b", "a").
		pass(2, phaseFinal).file("a", "two").
		rec(recManifest, byte('f'), "a", uint64(0o644), int64(1e18), uint64(3), sum("two")).
		rec(recManifest, byte('f'), "b", uint64(0o644), int64(1e18), uint64(3), sum("one")).
		rec(recEnd, uint64(2)).stream()
	ar := newArena(t)
	if _, err := ar.applyVersion(t, bytes.NewReader(stream), 4); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a": "two", "b": "one"} {
		if b, _ := os.ReadFile(filepath.Join(ar.root, name)); string(b) != want {
			t.Errorf("%s holds %q, want %q", name, b, want)
		}
	}
}

type hostileV4 struct {
	name   string
	stream []byte
	want   string // in the error
}

// hostileV4Streams are version-4 records a hostile peer may send.
func hostileV4Streams() []hostileV4 {
	data := []byte("0123456789")
	sparse := func(size uint64, exts ...uint64) *wire {
		w := newWire().pass(1, phaseOnline)
		w.begin(recSparse)
		w.str("s")
		w.uvarint(0o644)
		w.varint(1e18)
		w.uvarint(size)
		w.uvarint(uint64(len(exts) / 2))
		for i := 0; i < len(exts); i += 2 {
			w.uvarint(exts[i])
			w.uvarint(exts[i+1])
			w.bytes(data[:min(exts[i+1], uint64(len(data)))])
		}
		_ = w.flush()
		return w
	}
	return []hostileV4{
		{"extent beyond the size", sparse(100, 95, 10).stream(), "beyond the file's size"},
		{"extent offset beyond the size", sparse(100, 1<<40, 1).stream(), "beyond the file's size"},
		{"overlapping extents", sparse(100, 0, 10, 5, 10).stream(), "overlapping"},
		{"extents out of order", sparse(100, 50, 10, 0, 10).stream(), "out of order"},
		{"empty extent", sparse(100, 10, 0).stream(), "empty"},
		{"size beyond the maximum", sparse(maxFileSize + 1).stream(), "at most"},
		{"too many extents", func() []byte {
			w := newWire().pass(1, phaseOnline).rec(recSparse, "s", uint64(0o644), int64(0), uint64(1<<40), uint64(maxExtents+1))
			return w.stream()
		}(), "extents (at most"},
		{"link to an unknown path", newWire().pass(1, phaseOnline).file("a", "x").rec(recHardLink, "b", "nothere").stream(), "did not write"},
		{"link to ../", newWire().pass(1, phaseOnline).rec(recHardLink, "b", "../outside/canary").stream(), "../outside/canary"},
		{"link to an absolute path", newWire().pass(1, phaseOnline).rec(recHardLink, "b", "/etc/passwd").stream(), "/etc/passwd"},
		{"link to itself", newWire().pass(1, phaseOnline).file("a", "x").rec(recHardLink, "a", "a").stream(), "did not write"},
		{"link over its own directory", newWire().pass(1, phaseOnline).file("d/a", "x").rec(recHardLink, "d", "d/a").stream(), "did not write"},
		{"link to a symbolic link", newWire().pass(1, phaseOnline).rec(recLink, "l", "../outside/canary", int64(0)).rec(recHardLink, "b", "l").stream(), "did not write"},
		{"link to a removed file", newWire().pass(1, phaseOnline).file("a", "x").rec(recDelete, "a").rec(recHardLink, "b", "a").stream(), "did not write"},
		{"link to a file below a replaced directory", newWire().pass(1, phaseOnline).file("d/a", "x").
			rec(recLink, "d", "../outside", int64(0)).rec(recHardLink, "b", "d/a").stream(), "did not write"},
		{"link to a directory", newWire().pass(1, phaseOnline).rec(recDir, "d", uint64(0o755), int64(0)).rec(recHardLink, "b", "d").stream(), "did not write"},
	}
}

// Hostile version-4 records fail the stream as bad (a 400 to the peer),
// with an error that says what was wrong, and touch nothing outside the
// root.
func TestLiveWireV4HostileRecordsFail(t *testing.T) {
	for _, c := range hostileV4Streams() {
		t.Run(c.name, func(t *testing.T) {
			ar := newArena(t)
			_, err := ar.applyVersion(t, bytes.NewReader(c.stream), 4)
			if !errors.Is(err, errBadStream) {
				t.Fatalf("got %v, want a bad stream", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			ar.checkOutside(t)
			// In version 3 the same records are not known at all.
			if _, err := newArena(t).applyVersion(t, bytes.NewReader(c.stream), 3); !errors.Is(err, errBadStream) {
				t.Errorf("version 3: got %v, want a bad stream", err)
			}
		})
	}
}

// sparseRecord is a valid sparse file record of size bytes with one
// extent of len(data) bytes at each offset.
func (w *wire) sparseRecord(rel string, size uint64, data []byte, offs ...uint64) *wire {
	h := newContentHash()
	w.begin(recSparse)
	w.str(rel)
	w.uvarint(0o644)
	w.varint(1e18)
	w.uvarint(size)
	w.uvarint(uint64(len(offs)))
	for _, off := range offs {
		w.uvarint(off)
		w.uvarint(uint64(len(data)))
		w.bytes(data)
		hashExtentHead(h, int64(off), int64(len(data)))
		_, _ = h.Write(data)
	}
	sum := h.Sum128().Bytes()
	w.bytes(sum[:])
	_ = w.flush()
	return w
}

// The target charges what a sparse file allocates, its data, against the
// server's disk limit, not its size: 2 MiB of data in a 1 TiB file fit a
// 4 MiB limit and fail a 1.5 MiB one.
func TestLiveWireV4SparseChargesItsData(t *testing.T) {
	data := bytes.Repeat([]byte{7}, 1<<20)
	stream := newWire().pass(1, phaseOnline).sparseRecord("s", 1<<40, data, 0, 1<<39).stream()
	for _, tc := range []struct {
		limit int64
		fits  bool
	}{{4 << 20, true}, {3 << 19, false}} {
		ar := newArena(t)
		dst, err := sandbox.New(ar.root, sandbox.Options{UID: -1, GID: -1, DiskLimit: tc.limit})
		must(t, err)
		cr, err := newChunkReader(bytes.NewReader(stream))
		must(t, err)
		a := &applier{ctx: context.Background(), dst: dst.Trusted(), r: recReader{cr}, h: newContentHash(), maxWrite: 64 << 10,
			sums: map[pathKey]fileSum{}, log: func(uint64, byte) {}, v4: true, maxLinks: maxHardLinks}
		err = a.run()
		cr.Close()
		_ = dst.Close()
		if !tc.fits {
			if !errors.Is(err, sandbox.ErrNoSpace) {
				t.Errorf("limit %d: got %v, want no space", tc.limit, err)
			}
			continue
		}
		// The stream has no end: it fails as cut short, after the file.
		if !errors.Is(err, ErrSourceGone) {
			t.Fatalf("limit %d: %v", tc.limit, err)
		}
		st := statOf(t, filepath.Join(ar.root, "s"))
		if st.Size != 1<<40 || st.Blocks*512 > 3<<20 {
			t.Errorf("limit %d: size %d, %d bytes allocated", tc.limit, st.Size, st.Blocks*512)
		}
	}
}

// Every prefix of a valid version-4 stream (sparse file and hard link
// records) is a truncation: it fails as the source gone away, and writes
// nothing outside the root. Prefixes are sampled (about 1,500).
func TestLiveWireV4TruncatedStreamsFail(t *testing.T) {
	src := t.TempDir()
	f, err := os.Create(filepath.Join(src, "sparse.img"))
	must(t, err)
	for _, off := range []int64{0, 512 << 10} {
		_, err := f.WriteAt(bytes.Repeat([]byte{9}, 4096), off)
		must(t, err)
	}
	must(t, f.Truncate(1<<20))
	must(t, f.Close())
	must(t, os.WriteFile(filepath.Join(src, "first"), []byte("linked content"), 0o644))
	for _, n := range []string{"second", "third"} {
		must(t, os.Link(filepath.Join(src, "first"), filepath.Join(src, n)))
	}
	ls := newLiveSender(context.Background(), tree.Open(t, src), 4, "")
	stream := encodeLiveWith(t, ls, "none")
	if ls.links.Load() == 0 || ls.sparse.Load() == 0 {
		t.Fatalf("%d hard link and %d sparse file records in the stream, want both", ls.links.Load(), ls.sparse.Load())
	}
	ar := newArena(t)
	if _, err := ar.applyVersion(t, bytes.NewReader(stream), 4); err != nil {
		t.Fatalf("the whole stream: %v", err)
	}
	step := max(1, len(stream)/1500)
	for n := 0; n < len(stream); n += step {
		ar := newArena(t)
		if _, err := ar.applyVersion(t, bytes.NewReader(stream[:n]), 4); !errors.Is(err, ErrSourceGone) {
			t.Fatalf("the stream cut at %d of %d bytes: got %v, want the source gone", n, len(stream), err)
		}
		ar.checkOutside(t)
	}
}

// The target refuses a stream with more hard link records than its bound
// (maxHardLinks; 3 here): each name would cost it a table entry and no
// disk block.
func TestLiveWireV4HardLinksBounded(t *testing.T) {
	w := newWire().pass(1, phaseOnline).file("a", "x")
	for i := range 4 {
		w.rec(recHardLink, fmt.Sprintf("l%d", i), "a")
	}
	ar := newArena(t)
	cr, err := newChunkReader(bytes.NewReader(w.stream()))
	must(t, err)
	defer cr.Close()
	dst, err := sandbox.New(ar.root, sandbox.Options{UID: -1, GID: -1})
	must(t, err)
	defer dst.Close()
	a := &applier{ctx: context.Background(), dst: dst.Trusted(), r: recReader{cr}, h: newContentHash(), maxWrite: 64 << 10,
		sums: map[pathKey]fileSum{}, log: func(uint64, byte) {}, v4: true, maxLinks: 3}
	err = a.run()
	if !errors.Is(err, errBadStream) || !strings.Contains(err.Error(), "more than 3 hard link records") {
		t.Fatalf("got %v, want a bad stream of too many hard links", err)
	}
	if st := statOf(t, filepath.Join(ar.root, "a")); st.Nlink != 4 {
		t.Errorf("a has %d names, want 4 (three links made, the fourth refused)", st.Nlink)
	}
}
