package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// A backup node a made moves to node b (same server, same backup id): b
// adopts the manifest as its own copy. Node a deletes its copy and
// collects with every unused byte repacked: b's backup reads back exactly,
// before and after b's own collection. The control: the collection did
// remove blobs (a's other backup's), and without b's copy the backup would
// be gone (a's Delete really removed the canonical manifest). Deleting on
// b removes its copy too, and refused adoptions store nothing.
func TestAdoptedManifestOutlivesTheSourcesCopy(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	a, b := openShared(t, dir, "node-a", 0), openShared(t, dir, "node-b", 0)
	data := tarOf(t, randomFiles(40, 256<<10, 71))
	if _, err := a.Write("srv", "bk1", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write("srv", "other", bytes.NewReader(tarOf(t, randomFiles(10, 256<<10, 72)))); err != nil {
		t.Fatal(err)
	}
	name, m, err := a.ManifestRef("srv", "bk1")
	if err != nil || name != "bk1" {
		t.Fatalf("ManifestRef on the source: %q %v", name, err)
	}
	raw, got, err := b.ReadManifestNamed(ctx, "srv", name)
	if err != nil || got.SHA1 != m.SHA1 {
		t.Fatalf("ReadManifestNamed: %v", err)
	}
	// Refused: another backup's or another server's manifest, a path.
	if err := b.Adopt(ctx, "srv", "other", raw); err == nil {
		t.Fatal("adopted bk1's manifest as backup other")
	}
	if err := b.Adopt(ctx, "srv2", "bk1", raw); err == nil {
		t.Fatal("adopted srv's manifest for srv2")
	}
	for _, n := range []string{"../srv/bk1", "", "..", "a/b"} {
		if _, _, err := b.ReadManifestNamed(ctx, "srv", n); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ReadManifestNamed(%q): %v", n, err)
		}
	}
	if b.HasAdopted("srv", "bk1") {
		t.Fatal("a refused adoption stored a copy")
	}
	if err := b.Adopt(ctx, "srv", "bk1", raw); err != nil {
		t.Fatal(err)
	}
	if !b.HasAdopted("srv", "bk1") || a.HasAdopted("srv", "bk1") {
		t.Fatal("the copy is not node b's alone")
	}
	a.SetPolicy(Policy{MaxUnusedPercent: 0})
	if err := a.Delete("srv", "bk1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete("srv", "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Manifest("srv", "bk1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the control: node a still finds bk1 after deleting it: %v", err)
	}
	removed, err := a.GC()
	if err != nil || removed == 0 {
		t.Fatalf("node a's GC: %d removed, %v (the control: it must collect)", removed, err)
	}
	for round := range 2 {
		if got := readAll(t, b, "srv", "bk1"); !bytes.Equal(got, data) {
			t.Fatalf("round %d: the adopted backup reads back wrong", round)
		}
		if _, err := b.GC(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Delete("srv", "bk1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Manifest("srv", "bk1"); !errors.Is(err, ErrNotFound) || b.HasAdopted("srv", "bk1") {
		t.Fatalf("node b still finds bk1 after deleting it: %v", err)
	}
}
