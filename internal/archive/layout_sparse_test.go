package archive

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestWingsRestoreOfSparseAndLinks runs Wings' restore algorithm
// (wingsRestore) on a backup holding a sparse file and a file with three
// names: Wings gets the sparse file's bytes right but writes its holes as
// zeros (Go's reader expands them), and restores the first name of the
// linked file only (the link entries are in the tree trailer, which it
// never reads, rather than written by it as empty files). Wharf's
// extractor restores all of it (TestSparseAndHardLinksRoundTrip).
func TestWingsRestoreOfSparseAndLinks(t *testing.T) {
	src := t.TempDir()
	data := bytes.Repeat([]byte{0x42}, 100000)
	makeSparse(t, filepath.Join(src, "s.img"), 16<<20, data, 8<<20)
	if err := os.WriteFile(filepath.Join(src, "a.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"b.bin", "c.bin"} {
		if err := os.Link(filepath.Join(src, "a.bin"), filepath.Join(src, n)); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if _, err := Write(context.Background(), &out, newFS(t, src), backupOptions()); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := wingsRestore(out.Bytes(), dst); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(filepath.Join(src, "s.img"))
	got, err := os.ReadFile(filepath.Join(dst, "s.img"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Wings: s.img differs (%v)", err)
	}
	if a := allocated(t, filepath.Join(dst, "s.img")); a < 16<<20 {
		t.Fatalf("Wings: s.img allocates %d bytes, expected its holes written as zeros", a)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a.bin")); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("Wings: a.bin %d bytes, %v", len(b), err)
	}
	for _, n := range []string{"b.bin", "c.bin"} {
		if _, err := os.Lstat(filepath.Join(dst, n)); !os.IsNotExist(err) {
			t.Fatalf("Wings: %s: %v, expected missing (its entry is in the trailer)", n, err)
		}
	}
}
