package archive

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSizeBoundCoversArchive: the bound is at least the archive's size for
// every kind of entry, incompressible data (where gzip expands), long and
// non-ASCII names (PAX extensions), many tiny files (framing dominates) and
// every level, and it is not wildly above it.
func TestSizeBoundCoversArchive(t *testing.T) {
	root := t.TempDir()
	buildTree(t, root)
	noise := make([]byte, 3<<20+17)
	rand.Read(noise)
	long := strings.Repeat("very-long-directory-name-", 8)
	os.MkdirAll(filepath.Join(root, long, long), 0o755)
	os.WriteFile(filepath.Join(root, long, long, "noise-ünïcode-"+strings.Repeat("x", 150)), noise, 0o644)
	os.Symlink(strings.Repeat("../", 200)+"target", filepath.Join(root, long, "long-link"))
	os.Mkdir(filepath.Join(root, "tiny"), 0o755)
	// Enough long names that their extensions (a PAX header and records
	// each) far outweigh the bound's fixed room.
	for i := range 3000 {
		os.WriteFile(filepath.Join(root, "tiny", fmt.Sprintf("%s%d", strings.Repeat("t", 100+i%150), i)), []byte{byte(i)}, 0o644)
	}
	src := newFS(t, root)
	for _, level := range []int{LevelNone, ParseLevel("best_speed"), ParseLevel("best_compression")} {
		for _, opts := range []WriteOptions{
			{Level: level, Manifest: true, TreeTrailer: true},
			{Level: level},
			{Level: level, Manifest: true, TreeTrailer: true, Ignore: "tiny/\n"},
		} {
			data, res := writeArchive(t, src, opts)
			bound, err := SizeBound(context.Background(), src, opts)
			if err != nil {
				t.Fatal(err)
			}
			if bound < int64(len(data)) || res.Size != int64(len(data)) {
				t.Fatalf("level %d ignore %q: bound %d < archive %d", level, opts.Ignore, bound, len(data))
			}
			// Generous, not absurd: within 1 %, the fixed room and 2 KiB per
			// entry of the uncompressed archive.
			entries := res.Files + res.Dirs + res.Symlinks
			if slack := bound - int64(len(data)); level == LevelNone && slack > int64(len(data))/100+fixedOverhead+2048*entries {
				t.Fatalf("level %d: bound %d for an archive of %d", level, bound, len(data))
			}
		}
	}
}

// TestSizeBoundSparseGiants: sparse files count at what Write stores of
// them (issue 33 item 5): two 3 TiB files that use no disk and one with
// data scattered through 1 TiB of holes make a bound of a few MiB, still
// at least the archive's size. Before, the 6 TiB of holes counted whole
// and the bound refused the tree (ErrBoundTooLarge).
func TestSizeBoundSparseGiants(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"hole-a", "hole-b"} {
		f, err := os.Create(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(3 << 40); err != nil {
			f.Close()
			t.Skipf("this filesystem cannot make a 3 TiB sparse file: %v", err)
		}
		f.Close()
	}
	noise := make([]byte, 256<<10)
	rand.Read(noise)
	makeSparse(t, filepath.Join(root, "scattered"), 1<<40, noise, 0, 1<<30, 1<<39, 1<<40-int64(len(noise)))
	src := newFS(t, root)
	opts := WriteOptions{Manifest: true, TreeTrailer: true, Level: LevelBestSpeed}
	bound, err := SizeBound(context.Background(), src, opts)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := writeArchive(t, src, opts)
	if bound < int64(len(data)) || bound > 4<<20 {
		t.Fatalf("bound %d for an archive of %d bytes", bound, len(data))
	}
}
