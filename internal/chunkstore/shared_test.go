package chunkstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/testutil/wait"
)

// openShared opens the repository in dir as node, shared, with leases of
// ttl (0: the default) and no clock skew allowed (the nodes of a test
// share one clock).
func openShared(t *testing.T, dir, node string, ttl time.Duration) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimShared(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	s.SetShared(node)
	s.mu.Lock()
	if ttl > 0 {
		s.shared.ttl = ttl
	}
	s.shared.skew, s.shared.poll = 0, 10*time.Millisecond
	s.mu.Unlock()
	return s
}

// crashChildLeaseTTL is the lease of the crash tests' nodes: short, so
// the parent's collection soon sees a killed child's lease expire, yet
// long enough that a renewal (every TTL/4) lands in time on a loaded CI
// machine under the race detector (400 ms did not: ErrLeaseLost).
const crashChildLeaseTTL = 2 * time.Second

func readAll(t *testing.T, s *Store, server, backup string) []byte {
	t.Helper()
	m, err := s.Manifest(server, backup)
	if err != nil {
		t.Fatalf("%s/%s: %v", server, backup, err)
	}
	r := s.Reader(m)
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s/%s reads back: %v", server, backup, err)
	}
	return b
}

// The repository's id is stored once and every node reads the same.
func TestRepositoryIDIsStoredOnce(t *testing.T) {
	dir := t.TempDir()
	a, b := openShared(t, dir, "node-a", 0), openShared(t, dir, "node-b", 0)
	ctx := context.Background()
	none, err := b.RepositoryID(ctx, false)
	if err != nil || none != "" {
		t.Fatalf("before any node made it: %q, %v", none, err)
	}
	ida, err := a.RepositoryID(ctx, true)
	if err != nil || !isHexID(ida) {
		t.Fatalf("RepositoryID: %q, %v", ida, err)
	}
	idb, err := b.RepositoryID(ctx, true)
	if err != nil || idb != ida {
		t.Fatalf("node b reads %q (%v); node a made %q", idb, err, ida)
	}
	// Two nodes that made one at the same moment settle on the lowest.
	if err := a.b.Put(ctx, idsPrefix+"00000000000000000000000000000000", nil); err != nil {
		t.Fatal(err)
	}
	if id, _ := b.RepositoryID(ctx, true); id != "00000000000000000000000000000000" {
		t.Fatalf("after a second id: %q, want the lowest", id)
	}
	objs, _ := a.b.List(ctx, idsPrefix)
	if len(objs) != 2 {
		t.Fatalf("ids/ holds %d objects, want 2", len(objs))
	}
}

// Sharing nodes claim side by side; a node that does not share refuses
// them, and they refuse a repository it claimed.
func TestSharedClaims(t *testing.T) {
	ctx := context.Background()
	lb, err := NewLocalBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node-a", "node-b"} {
		if err := ClaimSharedBackend(ctx, lb, n); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
	var se *SharedError
	if err := ClaimBackend(ctx, lb, "node-c"); !errors.As(err, &se) || len(se.Others) != 2 {
		t.Fatalf("an exclusive node beside two sharing ones: %v", err)
	}
	lb2, _ := NewLocalBackend(t.TempDir())
	if err := ClaimBackend(ctx, lb2, "node-x"); err != nil {
		t.Fatal(err)
	}
	if err := ClaimSharedBackend(ctx, lb2, "node-y"); !errors.As(err, &se) || !se.Exclusive || se.Others[0] != "nodes/node-x" {
		t.Fatalf("a sharing node beside an exclusive one: %v", err)
	}
	if objs, _ := lb2.List(ctx, nodesPrefix); len(objs) != 1 {
		t.Fatalf("the refused node left its claim: %v", objs)
	}
}

// A node learns the packs another node wrote after it opened the
// repository: it reads that node's backups, and with node-wide
// deduplication does not store their chunks again.
func TestSharedIndexLearnsOtherNodesPacks(t *testing.T) {
	dir := t.TempDir()
	a, b := openShared(t, dir, "node-a", 0), openShared(t, dir, "node-b", 0)
	data := tarOf(t, randomFiles(40, 256<<10, 31))
	if _, err := a.Write("srv", "b1", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, b, "srv", "b1"); !bytes.Equal(got, data) {
		t.Fatal("node b reads node a's backup wrong")
	}
	b.SetPolicy(Policy{NodeWideDedup: true, MaxUnusedPercent: 5})
	before, _ := b.Usage()
	if _, err := b.Write("srv", "b2", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	after, _ := b.Usage()
	if grew := after - before; grew > int64(len(data))/20 {
		t.Fatalf("node b stored %d bytes again for a backup node a holds (%d bytes)", grew, len(data))
	}
}

// Node a deletes every backup of its own and collects while node b holds
// backups sharing chunks with them (b's index read before a's GC): b's
// backups still read back exactly, before and after b's own GC.
func TestSharedGCKeepsOtherNodesBackups(t *testing.T) {
	dir := t.TempDir()
	a, b := openShared(t, dir, "node-a", 0), openShared(t, dir, "node-b", 0)
	files := randomFiles(60, 256<<10, 32)
	da := tarOf(t, files)
	db := tarOf(t, append(append([][2]string{}, files[:20]...), randomFiles(10, 256<<10, 33)...))
	if _, err := a.Write("srv-a", "a1", bytes.NewReader(da)); err != nil {
		t.Fatal(err)
	}
	b.SetPolicy(Policy{NodeWideDedup: true, MaxUnusedPercent: 0})
	if _, err := b.Write("srv-b", "b1", bytes.NewReader(db)); err != nil {
		t.Fatal(err)
	}
	readAll(t, b, "srv-b", "b1") // b's index names a's packs now
	a.SetPolicy(Policy{MaxUnusedPercent: 0})
	if err := a.Delete("srv-a", "a1"); err != nil {
		t.Fatal(err)
	}
	removed, err := a.GC()
	if err != nil || removed == 0 {
		t.Fatalf("node a's GC: %d removed, %v", removed, err)
	}
	for round := range 2 {
		if got := readAll(t, b, "srv-b", "b1"); !bytes.Equal(got, db) {
			t.Fatalf("round %d: node b's backup reads back wrong after node a's GC", round)
		}
		if _, err := b.GC(); err != nil {
			t.Fatal(err)
		}
	}
	// And b's next backup with node-wide deduplication, from its index.
	if _, err := b.Write("srv-b", "b2", bytes.NewReader(db)); err != nil {
		t.Fatal(err)
	}
	fresh, err := OpenExisting(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"b1", "b2"} {
		if got := readAll(t, fresh, "srv-b", k); !bytes.Equal(got, db) {
			t.Fatalf("%s reads back wrong from a fresh open", k)
		}
	}
}

// A collection is deferred while another node holds its lease (a backup
// runs there), and runs once the lease is released; a lease past its
// expiry (a crashed node) is ignored, a live one is not.
func TestSharedGCDeferredByOtherNodesLease(t *testing.T) {
	dir := t.TempDir()
	a, b := openShared(t, dir, "node-a", 0), openShared(t, dir, "node-b", 0)
	a.SetPolicy(Policy{MaxUnusedPercent: 0})
	data := tarOf(t, randomFiles(20, 256<<10, 34))
	if _, err := a.Write("srv-a", "a1", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete("srv-a", "a1"); err != nil {
		t.Fatal(err)
	}
	other := tarOf(t, randomFiles(20, 256<<10, 37))
	w := b.NewWriter("srv-b", "b1") // holds node b's lease
	if _, err := w.Write(other); err != nil {
		t.Fatal(err)
	}
	usage, _ := a.Usage()
	if _, err := a.GC(); !errors.Is(err, ErrGCDeferred) {
		t.Fatalf("GC beside a running backup of node b: %v, want deferred", err)
	}
	if u, _ := a.Usage(); u < usage {
		t.Fatalf("a deferred GC deleted %d bytes", usage-u)
	}
	if _, err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if objs, _ := a.b.List(context.Background(), writersPrefix); len(objs) != 0 {
		t.Fatalf("node b's lease is still there after its backup: %v", objs)
	}
	if n, err := a.GC(); err != nil || n == 0 {
		t.Fatalf("GC once node b released its lease: %d, %v", n, err)
	}
	if got := readAll(t, b, "srv-b", "b1"); !bytes.Equal(got, other) {
		t.Fatal("node b's backup reads back wrong")
	}

	// A crashed node's lease: live until its expiry, then ignored.
	put := func(expires time.Time) {
		raw, _ := json.Marshal(leaseBody{Node: "node-c", Expires: expires})
		if err := a.b.Put(context.Background(), leaseName(writersPrefix, "node-c"), raw); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Write("srv-b", "b2", bytes.NewReader(tarOf(t, randomFiles(4, 256<<10, 35)))); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete("srv-b", "b2"); err != nil {
		t.Fatal(err)
	}
	put(time.Now().Add(time.Minute))
	if _, err := a.GC(); !errors.Is(err, ErrGCDeferred) {
		t.Fatalf("GC beside node c's live lease: %v, want deferred", err)
	}
	put(time.Now().Add(-time.Second))
	if n, err := a.GC(); err != nil || n == 0 {
		t.Fatalf("GC beside node c's expired lease: %d, %v", n, err)
	}
}

// Within the skew bound, a lease past its expiry by the reader's clock is
// still live: the writer's clock may be behind.
func TestSharedLeaseSkewBound(t *testing.T) {
	dir := t.TempDir()
	a := openShared(t, dir, "node-a", 0)
	a.mu.Lock()
	a.shared.skew = SkewBound
	a.mu.Unlock()
	ctx := context.Background()
	for _, tt := range []struct {
		late time.Duration
		live bool
	}{{SkewBound / 2, true}, {SkewBound + 5*time.Second, false}} {
		raw, _ := json.Marshal(leaseBody{Node: "node-c", Expires: time.Now().Add(-tt.late)})
		if err := a.b.Put(ctx, leaseName(writersPrefix, "node-c"), raw); err != nil {
			t.Fatal(err)
		}
		live, err := a.liveOthers(ctx, writersPrefix)
		if err != nil || (len(live) == 1) != tt.live {
			t.Fatalf("a lease expired %v ago: live %v (%v), want %v", tt.late, live, err, tt.live)
		}
	}
}

// leaseListBackend counts the listings of the collector leases.
type leaseListBackend struct {
	*LocalBackend
	gcLists atomic.Int64
}

func (c *leaseListBackend) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if prefix == gcPrefix {
		c.gcLists.Add(1)
	}
	return c.LocalBackend.List(ctx, prefix)
}

// A backup that starts while another node collects waits for the
// collection to end (it reads the collector's lease again and again), and
// then sees the collection's index.
func TestSharedWriterWaitsForOtherNodesGC(t *testing.T) {
	dir := t.TempDir()
	a := openShared(t, dir, "node-a", 0)
	lb, _ := NewLocalBackend(dir)
	cb := &leaseListBackend{LocalBackend: lb}
	b, err := OpenBackend(context.Background(), cb)
	if err != nil {
		t.Fatal(err)
	}
	b.SetShared("node-b")
	b.mu.Lock()
	b.shared.skew, b.shared.poll = 0, 5*time.Millisecond
	b.mu.Unlock()
	lease, err := a.takeGCLease(context.Background())
	if err != nil || lease == nil {
		t.Fatalf("takeGCLease: %v", err)
	}
	done := make(chan error, 1)
	data := tarOf(t, randomFiles(4, 256<<10, 36))
	go func() {
		_, err := b.Write("srv-b", "b1", bytes.NewReader(data))
		done <- err
	}()
	wait.For(t, 30*time.Second, func() bool { return cb.gcLists.Load() >= 3 }, "node b reading the collector's lease")
	select {
	case err := <-done:
		t.Fatalf("node b's backup ended while node a collected: %v", err)
	default:
	}
	lease.drop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, a, "srv-b", "b1"); !bytes.Equal(got, data) {
		t.Fatal("node b's backup reads back wrong")
	}
}

// TestSharedCrashChild is node a of TestSharedKill9AtEveryStep (skipped
// otherwise): it writes "new", deletes "mixed" and collects, in a shared
// repository, with leases of crashChildLeaseTTL.
func TestSharedCrashChild(t *testing.T) {
	dir := os.Getenv("WHARF_CHUNKSTORE_SHARED_CRASH_DIR")
	if dir == "" {
		t.Skip("the child of TestSharedKill9AtEveryStep")
	}
	at, _ := strconv.ParseInt(os.Getenv("WHARF_CHUNKSTORE_CRASH_AT"), 10, 64)
	lb, err := NewLocalBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	cb := &crashBackend{LocalBackend: lb, at: at, skipLocks: true}
	s, err := OpenBackend(context.Background(), cb)
	if err != nil {
		t.Fatal(err)
	}
	s.SetShared("node-a")
	s.mu.Lock()
	s.shared.ttl, s.shared.skew = crashChildLeaseTTL, 0
	s.mu.Unlock()
	s.SetPolicy(Policy{MaxUnusedPercent: 0})
	_, _, fresh := crashStreams(t)
	if _, err := s.Write("srv", "new", bytes.NewReader(fresh)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("srv", "mixed"); err != nil {
		t.Fatal(err)
	}
	removed, err := s.GC()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("OPS %d %d\n", cb.ops.Load(), removed)
}

// TestSharedKill9AtEveryStep: node b holds a backup sharing chunks with
// node a's backups and has read it (its index names a's packs); node a is
// killed just before each of its changes to the repository while it backs
// up, deletes and collects. After every crash node b's backup, and every
// backup of a that exists, reads back exactly through b's index of
// before; once a's leases expired, b collects, and everything still reads
// back.
func TestSharedKill9AtEveryStep(t *testing.T) {
	if os.Getenv("WHARF_CHUNKSTORE_SHARED_CRASH_DIR") != "" {
		t.Skip("in the child")
	}
	if outsideRace(t) {
		return
	}
	keep, mixed, fresh := crashStreams(t)
	bk := tarOf(t, append(randomFiles(40, 256<<10, 11)[10:30], randomFiles(4, 256<<10, 38)...))
	want := map[string][]byte{"keep": keep, "mixed": mixed, "new": fresh, "bk": bk}
	template := t.TempDir()
	a := openShared(t, template, "node-a", 0)
	for _, b := range []struct {
		id   string
		data []byte
	}{{"mixed", mixed}, {"keep", keep}} {
		if _, err := a.Write("srv", b.id, bytes.NewReader(b.data)); err != nil {
			t.Fatal(err)
		}
	}
	b0 := openShared(t, template, "node-b", 0)
	b0.SetPolicy(Policy{NodeWideDedup: true})
	if _, err := b0.Write("srv-b", "bk", bytes.NewReader(bk)); err != nil {
		t.Fatal(err)
	}
	total := -1
	for at := 1; total < 0 || at <= total; at++ {
		dir := t.TempDir()
		if out, err := exec.Command("cp", "-a", template+"/.", dir).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		b := openShared(t, dir, "node-b", 0)
		if got := readAll(t, b, "srv-b", "bk"); !bytes.Equal(got, bk) {
			t.Fatal("bk reads back wrong before the crash")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestSharedCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "WHARF_CHUNKSTORE_SHARED_CRASH_DIR="+dir, "WHARF_CHUNKSTORE_CRASH_AT="+strconv.Itoa(at))
		out, err := runCrashChild(t, cmd)
		var ee *exec.ExitError
		killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
		if !killed {
			if err != nil {
				t.Fatalf("child (crash at %d): %v\n%s", at, err, out)
			}
			i := bytes.Index(out, []byte("OPS "))
			var removed int
			if i < 0 {
				t.Fatalf("child output: %s", out)
			}
			if _, err := fmt.Sscanf(string(out[i:]), "OPS %d %d", &total, &removed); err != nil || removed == 0 {
				t.Fatalf("child output (the GC must remove the mixed backup's blobs): %v %s", err, out)
			}
			t.Logf("%d changes, %d blobs removed", total, removed)
		}
		checkShared(t, b, at, want)
		// Node a's leases of the crash expire; then b collects.
		wait.ForNoError(t, 30*time.Second, func() error { _, err := b.GC(); return err }, "node b's GC after node a's crash at %d", at)
		checkShared(t, b, at, want)
	}
	if total < 8 {
		t.Fatalf("the scenario made only %d changes", total)
	}
}

// checkShared reads every backup through s and checks it; bk and keep
// must be there.
func checkShared(t *testing.T, s *Store, at int, want map[string][]byte) {
	t.Helper()
	ms, err := s.List()
	if err != nil {
		t.Fatalf("crash at %d: %v", at, err)
	}
	seen := map[string]bool{}
	for _, m := range ms {
		seen[m.Backup] = true
		if got := readAll(t, s, m.Server, m.Backup); !bytes.Equal(got, want[m.Backup]) {
			t.Fatalf("crash at %d: backup %s reads back wrong", at, m.Backup)
		}
	}
	if !seen["keep"] || !seen["bk"] {
		t.Fatalf("crash at %d: a backup is lost: %v", at, seen)
	}
}

// TestSharedWriterCrashChild is node b of TestSharedKill9WriterThenGC
// (skipped otherwise): it writes a backup of several packs, with leases
// of crashChildLeaseTTL, killed just before its n-th change.
func TestSharedWriterCrashChild(t *testing.T) {
	dir := os.Getenv("WHARF_CHUNKSTORE_SHARED_WRITER_DIR")
	if dir == "" {
		t.Skip("the child of TestSharedKill9WriterThenGC")
	}
	at, _ := strconv.ParseInt(os.Getenv("WHARF_CHUNKSTORE_CRASH_AT"), 10, 64)
	lb, err := NewLocalBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	cb := &crashBackend{LocalBackend: lb, at: at, skipLocks: true}
	s, err := OpenBackend(context.Background(), cb)
	if err != nil {
		t.Fatal(err)
	}
	s.SetShared("node-b")
	s.mu.Lock()
	s.shared.ttl, s.shared.skew = crashChildLeaseTTL, 0
	s.mu.Unlock()
	s.SetPolicy(Policy{NodeWideDedup: true})
	if _, err := s.Write("srv-b", "bnew", bytes.NewReader(sharedWriterStream(t))); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("OPS %d\n", cb.ops.Load())
}

// sharedWriterStream is node b's backup: part of node a's "keep", and
// 40 MiB of its own (three packs).
func sharedWriterStream(t *testing.T) []byte {
	return tarOf(t, append(randomFiles(8, 256<<10, 10)[:4], randomFiles(160, 256<<10, 39)...))
}

// TestSharedKill9WriterThenGC: node b is killed just before each change
// it makes while it backs up into the shared repository. Node a's
// collection waits until b's lease, left by the kill, expired (its packs
// written so far are not collected under it), then runs:
// a's backups read back exactly, b's backup is whole or absent, and the
// packs of b's crashed backup are collected.
func TestSharedKill9WriterThenGC(t *testing.T) {
	if os.Getenv("WHARF_CHUNKSTORE_SHARED_WRITER_DIR") != "" {
		t.Skip("in the child")
	}
	if outsideRace(t) {
		return
	}
	keep, mixed, _ := crashStreams(t)
	bnew := sharedWriterStream(t)
	want := map[string][]byte{"keep": keep, "mixed": mixed, "bnew": bnew}
	template := t.TempDir()
	a0 := openShared(t, template, "node-a", 0)
	for _, b := range []struct {
		id   string
		data []byte
	}{{"mixed", mixed}, {"keep", keep}} {
		if _, err := a0.Write("srv", b.id, bytes.NewReader(b.data)); err != nil {
			t.Fatal(err)
		}
	}
	leftLease := 0
	total := -1
	for at := 1; total < 0 || at <= total; at++ {
		dir := t.TempDir()
		if out, err := exec.Command("cp", "-a", template+"/.", dir).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		a := openShared(t, dir, "node-a", 0)
		a.SetPolicy(Policy{MaxUnusedPercent: 0})
		cmd := exec.Command(os.Args[0], "-test.run=^TestSharedWriterCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "WHARF_CHUNKSTORE_SHARED_WRITER_DIR="+dir, "WHARF_CHUNKSTORE_CRASH_AT="+strconv.Itoa(at))
		out, err := runCrashChild(t, cmd)
		var ee *exec.ExitError
		killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
		if !killed {
			if err != nil {
				t.Fatalf("child (crash at %d): %v\n%s", at, err, out)
			}
			i := bytes.Index(out, []byte("OPS "))
			if i < 0 {
				t.Fatalf("child output: %s", out)
			}
			if _, err := fmt.Sscanf(string(out[i:]), "OPS %d", &total); err != nil {
				t.Fatalf("child output: %v %s", err, out)
			}
			t.Logf("%d changes", total)
		}
		if err := a.Delete("srv", "mixed"); err != nil {
			t.Fatal(err)
		}
		// The kill left b's lease behind (live for up to crashChildLeaseTTL; a
		// collection beside a live lease is deferred:
		// TestSharedGCDeferredByOtherNodesLease).
		if objs, _ := a.b.List(context.Background(), writersPrefix); killed && len(objs) == 1 {
			leftLease++
		}
		wait.ForNoError(t, 30*time.Second, func() error { _, err := a.GC(); return err }, "node a's GC after node b's crash at %d", at)
		delete(want, "mixed")
		ms, err := a.List()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, m := range ms {
			seen[m.Backup] = true
			if got := readAll(t, a, m.Server, m.Backup); !bytes.Equal(got, want[m.Backup]) {
				t.Fatalf("crash at %d: backup %s reads back wrong", at, m.Backup)
			}
		}
		if !seen["keep"] {
			t.Fatalf("crash at %d: node a's backup is lost", at)
		}
		if !seen["bnew"] && len(a.unindexedPacks(context.Background())) != 0 {
			t.Fatalf("crash at %d: the crashed backup's packs were not collected", at)
		}
		want["mixed"] = mixed
	}
	if total < 4 || leftLease < total {
		t.Fatalf("the scenario made %d changes; node b's kill left its lease %d times", total, leftLease)
	}
}
