package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/testutil/wait"
)

const (
	staleSnap = "transfer-0b1c2d3e-4f50-4617-8899-aabbccddeeff"
	heldSnap  = "transfer-11111111-2222-4333-8444-555555555555"
)

// crashLease stops node s's lease renewal and leaves its lease object in
// the bucket, as a node killed with kill -9 does.
func crashLease(s *Store) {
	s.mu.Lock()
	l := s.shared.leases
	s.mu.Unlock()
	close(l.stop)
	<-l.done
}

func hasManifest(t *testing.T, s *Store, server, name string) bool {
	t.Helper()
	_, err := s.Manifest(server, name)
	if err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// A transfer snapshot whose source died (its hold never released, its
// lease left in the bucket) is collected by another node once that
// lease expired: before, the collection is deferred; after, the manifest
// is gone, the chunks only it named leave the bucket, and the backups
// that shared chunks with it read back exactly.
func TestStaleTransferSnapshotOfDeadNodeCollected(t *testing.T) {
	dir := t.TempDir()
	// Long enough that the dead node's renewals land in time while it
	// writes on a loaded machine (400 ms did not: ErrLeaseLost).
	const ttl = crashChildLeaseTTL
	b := openShared(t, dir, "node-b", ttl)
	dead := openShared(t, dir, "node-dead", ttl)
	b.SetPolicy(Policy{MaxUnusedPercent: 0})
	files := randomFiles(40, 256<<10, 61)
	backup := tarOf(t, files)
	if _, err := dead.Write("srv", "bk1", bytes.NewReader(backup)); err != nil {
		t.Fatal(err)
	}
	// The transfer snapshot: the backup's files and 5 MiB of new ones.
	snap := tarOf(t, append(append([][2]string{}, files...), randomFiles(20, 256<<10, 62)...))
	h, err := dead.HoldTransfer(context.Background(), "srv", staleSnap)
	if err != nil {
		t.Fatal(err)
	}
	_ = h // never released: the node dies holding it
	if _, err := dead.Write("srv", staleSnap, bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	before, _ := b.Usage()
	// The control: the snapshot is in the bucket, and the collection is
	// deferred while the node's lease is live (still renewed: no timing
	// decides this).
	if !hasManifest(t, b, "srv", staleSnap) {
		t.Fatal("the transfer snapshot is not in the bucket")
	}
	if _, err := b.GC(); !errors.Is(err, ErrGCDeferred) {
		t.Fatalf("GC beside the node's live lease: %v, want deferred", err)
	}
	if !hasManifest(t, b, "srv", staleSnap) {
		t.Fatal("a deferred collection deleted the transfer snapshot")
	}
	crashLease(dead)
	wait.ForNoError(t, 30*time.Second, func() error {
		_, err := b.GC()
		return err
	}, "node b's collection once the dead node's lease expired")
	if hasManifest(t, b, "srv", staleSnap) {
		t.Fatal("the stale transfer snapshot is still in the bucket")
	}
	after, _ := b.Usage()
	if freed := before - after; freed < 4<<20 {
		t.Fatalf("the collection freed %d bytes, want at least the snapshot's 5 MiB of unique chunks", freed)
	}
	if got := readAll(t, b, "srv", "bk1"); !bytes.Equal(got, backup) {
		t.Fatal("the backup sharing chunks with the snapshot reads back wrong")
	}
	fresh, err := OpenExisting(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, fresh, "srv", "bk1"); !bytes.Equal(got, backup) {
		t.Fatal("the backup reads back wrong from a fresh open")
	}
}

// A transfer snapshot a running transfer of the collecting node holds is
// kept (the control); once the hold is released without the snapshot's
// deletion (a transfer whose delete failed) the next collection takes it.
// One held by a live lease of another node defers the collection. A hold
// asked for while a collection is deleting the snapshot is refused.
func TestTransferSnapshotHeldIsKept(t *testing.T) {
	dir := t.TempDir()
	a, b := openShared(t, dir, "node-a", 0), openShared(t, dir, "node-b", 0)
	a.SetPolicy(Policy{MaxUnusedPercent: 0})
	ctx := context.Background()
	data := tarOf(t, randomFiles(20, 256<<10, 63))
	h, err := a.HoldTransfer(ctx, "srv", heldSnap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write("srv", heldSnap, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GC(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, b, "srv", heldSnap); !bytes.Equal(got, data) {
		t.Fatal("the held transfer snapshot reads back wrong after its node's collection")
	}
	if err := h.Valid(); err != nil {
		t.Fatalf("a hold whose lease was renewed in time: %v", err)
	}
	// Node a's hold keeps its lease: node b's collection is deferred.
	if _, err := b.GC(); !errors.Is(err, ErrGCDeferred) {
		t.Fatalf("node b's GC while node a holds a transfer: %v, want deferred", err)
	}
	if !hasManifest(t, b, "srv", heldSnap) {
		t.Fatal("a deferred collection deleted the held snapshot")
	}
	h.Release()
	h.Release() // once only
	// A hold asked for while the collection deletes the snapshot.
	var refused error
	a.afterMark = func() { _, refused = a.HoldTransfer(ctx, "srv", heldSnap) }
	if n, err := a.GC(); err != nil || n == 0 {
		t.Fatalf("GC once the hold was released: %d, %v", n, err)
	}
	a.afterMark = nil
	if !errors.Is(refused, ErrTransferCollected) {
		t.Fatalf("a hold during the snapshot's collection: %v, want refused", refused)
	}
	if hasManifest(t, a, "srv", heldSnap) {
		t.Fatal("the released snapshot is still in the bucket")
	}
	if a.held[transferKey("srv", heldSnap)] != 0 || len(a.condemned) != 0 {
		t.Fatalf("holds left: %v, condemned left: %v", a.held, a.condemned)
	}
	if objs, _ := a.b.List(ctx, writersPrefix); len(objs) != 0 {
		t.Fatalf("leases left after the holds were released: %v", objs)
	}
}

// A hold whose lease was not surely live for a moment is no longer valid,
// even after its renewal succeeded again: another node may have collected
// the snapshot meanwhile.
func TestTransferHoldLapsedLease(t *testing.T) {
	a := openShared(t, t.TempDir(), "node-a", 400*time.Millisecond)
	h, err := a.HoldTransfer(context.Background(), "srv", heldSnap)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if err := h.Valid(); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	gen := a.shared.leases.gen
	a.shared.leases.until = time.Now().Add(-time.Millisecond) // a renewal came too late
	a.mu.Unlock()
	if err := h.Valid(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a lapsed lease: %v, want lost", err)
	}
	wait.For(t, 30*time.Second, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.shared.leases.gen != gen && time.Now().Before(a.shared.leases.until)
	}, "the lease's renewal after the lapse")
	if err := h.Valid(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renewed after a lapse: %v, want lost", err)
	}
	if _, err := a.HoldTransfer(context.Background(), "srv", "transfer-../x"); err == nil {
		t.Fatal("a hold on a name that is not a transfer snapshot's")
	}
}

func TestIsTransferSnapshot(t *testing.T) {
	for name, want := range map[string]bool{
		staleSnap: true, heldSnap: true, "transfer-": false, "0b1c2d3e-4f50-4617-8899-aabbccddeeff": false,
		"transfer-0b1c2d3e-4f50-4617-8899-aabbccddeefg": false, "transfer-0b1c2d3e-4f50-4617-8899-aabbccddeeff@n": false,
		"transfer-0b1c2d3e04f50-4617-8899-aabbccddeeff": false,
	} {
		if got := IsTransferSnapshot(name); got != want {
			t.Errorf("%q: %v, want %v", name, got, want)
		}
	}
}
