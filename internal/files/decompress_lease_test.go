package files

import (
	"errors"
	"net"
	"os"
	"testing"

	"github.com/wharf/wharf/internal/sandbox"
)

// The child's writes take the server's limit in shares: the daemon's count
// holds only what was leased (others keep the rest), and when the limit is
// reached the child's next write fails as out of space.
func TestLeasesShareTheLimit(t *testing.T) {
	root := t.TempDir()
	daemon, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1, DiskLimit: 100 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer daemon.Close()
	l := &leaser{fsys: daemon}
	first := l.grant(entryMargin)
	if first != leaseChunk || daemon.Usage() != leaseChunk {
		t.Fatalf("first lease %d, daemon's count %d", first, daemon.Usage())
	}
	child, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1, DiskLimit: first})
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	ours, theirs := net.Pipe()
	done := make(chan struct{})
	go func() { l.serve(ours); close(done) }()
	b := &budget{fsys: child, conn: theirs}

	f, err := child.OpenFile("big", os.O_WRONLY|os.O_CREATE, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := budgetWriter{f, b}
	chunk := make([]byte, 1<<20)
	for range 50 { // 50 MiB: a second lease
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if l.granted != 2*leaseChunk || daemon.Usage() != 2*leaseChunk {
		t.Fatalf("after 50 MiB: granted %d, daemon's count %d", l.granted, daemon.Usage())
	}
	// Others write beside it, within what is not leased.
	if err := daemon.HasSpaceFor(30 << 20); err != nil {
		t.Fatalf("no room left for the daemon's other writers: %v", err)
	}
	for i := 0; ; i++ {
		_, err := w.Write(chunk)
		if errors.Is(err, sandbox.ErrNoSpace) {
			if i != 50 {
				t.Fatalf("out of space after %d more MiB, want 50", i)
			}
			break
		}
		if err != nil || i > 60 {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	_ = f.Close()
	_ = theirs.Close()
	<-done
	l.release()
	if daemon.Usage() != 0 {
		t.Fatalf("daemon's count %d after release", daemon.Usage())
	}
}
