package backup

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/wharf/wharf/internal/testutil/tree"
)

// streamService is a repository service holding backup b1 of a 6 MiB
// incompressible tree.
func streamService(t *testing.T) (*Service, string) {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "srv")
	writeTree(t, root, map[string][]byte{"a.bin": randomData(3 << 20), "sub/b.bin": randomData(3 << 20)})
	srv := benchServer{tree.Open(t, root)}
	var read []string
	svc := repoService(t, dir, &read)
	if _, err := svc.createRepository(context.Background(), srv, "b1", ""); err != nil {
		t.Fatal(err)
	}
	return svc, srv.UUID()
}

// Streams closed after 512 KiB (a download the client cancelled) leave no
// goroutine behind: pgzip never sees the broken pipe's error, so its
// output goroutine ends with its Close, and Close waits for the generation
// (before, each left pgzip's goroutine and its buffers for ever). The
// transfer's stream and the signed download's are the same.
func TestInterruptedStreamsLeaveNothing(t *testing.T) {
	svc, server := streamService(t)
	// Taken before the streams: what runs after them and is not in it is
	// theirs. goleak waits a while for goroutines that are ending (pgzip's
	// block goroutine may still be returning after Close got its result).
	before := goleak.IgnoreCurrent()
	for i := range 20 {
		var rc io.ReadCloser
		var err error
		if i%2 == 0 {
			rc, err = svc.OpenRepositoryDownload(context.Background(), server, "b1")
		} else {
			rc, err = svc.OpenRepositoryStream(context.Background(), server, "b1")
		}
		if err != nil {
			t.Fatal(err)
		}
		if n, err := io.CopyN(io.Discard, rc, 512<<10); n != 512<<10 || err != nil {
			t.Fatalf("read %d bytes: %v", n, err)
		}
		rc.Close()
	}
	// Close has waited for each generation: nothing of them is left.
	goleak.VerifyNone(t, before)
}

// A stream whose context ends while its reader waits stops, and its Close
// returns.
func TestStreamEndsWithItsContext(t *testing.T) {
	svc, server := streamService(t)
	ctx, cancel := context.WithCancel(context.Background())
	rc, err := svc.OpenRepositoryDownload(ctx, server, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, rc, 64<<10); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.Copy(io.Discard, rc); !errors.Is(err, context.Canceled) {
		t.Fatalf("the stream after its context ended: %v", err)
	}
	rc.Close()
}

// Beyond max_per_server (4 by default) a server's download is refused
// with ErrServerDownloads, beyond max_per_node any with ErrNodeDownloads;
// closing one frees its slot.
func TestDownloadSlots(t *testing.T) {
	svc, server := streamService(t)
	open := func(srv string) (io.ReadCloser, error) {
		return svc.OpenRepositoryDownload(context.Background(), srv, "b1")
	}
	var held []io.ReadCloser
	for range 4 {
		rc, err := open(server)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, rc)
	}
	if _, err := open(server); !errors.Is(err, ErrServerDownloads) {
		t.Fatalf("fifth download of one server: %v", err)
	}
	// Another server's backup that is not there: its slot is given back.
	if _, err := open("other"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another server's download: %v", err)
	}
	held[0].Close()
	held[0].Close() // twice: one slot freed
	rc, err := open(server)
	if err != nil {
		t.Fatalf("after a close: %v", err)
	}
	held[0] = rc
	for _, rc := range held {
		rc.Close()
	}
	d := &svc.downloads
	d.mu.Lock()
	if d.node != 0 || len(d.perServer) != 0 {
		t.Fatalf("slots held after every close: node %d, servers %v", d.node, d.perServer)
	}
	d.mu.Unlock()

	var slots downloadSlots
	r1, err := slots.take("a", 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slots.take("b", 2, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := slots.take("c", 2, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := slots.take("d", 2, 3); !errors.Is(err, ErrNodeDownloads) {
		t.Fatalf("beyond the node's cap: %v", err)
	}
	r1()
	if _, err := slots.take("d", 2, 3); err != nil {
		t.Fatalf("after a release: %v", err)
	}
}
