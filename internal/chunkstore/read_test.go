package chunkstore

import (
	"bytes"
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wharf/wharf/internal/testutil/wait"
)

// countingBackend counts the bytes its Gets return.
type countingBackend struct {
	Backend
	got  atomic.Int64
	gets atomic.Int64
}

func (b *countingBackend) Get(ctx context.Context, name string, off, length int64) ([]byte, error) {
	data, err := b.Backend.Get(ctx, name, off, length)
	b.got.Add(int64(len(data)))
	b.gets.Add(1)
	return data, err
}

// budgetStore is a store on a counting backend holding one backup of 32
// MiB of incompressible files.
func budgetStore(t *testing.T) (*Store, *countingBackend, Manifest, []byte) {
	t.Helper()
	lb, err := NewLocalBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cb := &countingBackend{Backend: lb}
	s, err := OpenBackend(context.Background(), cb)
	if err != nil {
		t.Fatal(err)
	}
	data := tarOf(t, randomFiles(64, 512<<10, 7))
	m, err := s.Write("srv", "b1", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	cb.got.Store(0)
	return s, cb, m, data
}

// blockedSignal sets bud to signal when its planner waits for room.
func blockedSignal(bud *readBudget) <-chan struct{} {
	ch := make(chan struct{}, 1)
	bud.wait = func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return ch
}

func waitBlocked(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	wait.For(t, 10*time.Second, func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}, "the read-ahead to wait for its consumer")
}

// A reader read for 64 KiB and then left alone reads from the backend and
// holds only its budget, however large the backup; read on, it gives the
// whole stream, and holds nothing at the end. (Before the budget, the
// store read 2×GOMAXPROCS groups of 8 MiB and 16 chunks ahead: the whole
// 32 MiB here.)
func TestReaderReadsAheadOnlyAsFarAsConsumed(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, cb, m, data := budgetStore(t)
	bud := newReadBudget(readAhead)
	blocked := blockedSignal(bud)
	r := s.readerWithin(m, bud)
	defer r.Close()
	head := make([]byte, 64<<10)
	if _, err := io.ReadFull(r, head); err != nil {
		t.Fatal(err)
	}
	waitBlocked(t, blocked)
	if got := cb.got.Load(); got > readAhead+int64(len(head))+maxChunk {
		t.Fatalf("read %d bytes from the backend for 64 KiB consumed; budget %d", got, readAhead)
	}
	bud.mu.Lock()
	ahead := bud.held
	bud.mu.Unlock()
	// It waits when the next group (up to 1 MiB read, 1 MiB decoded) does
	// not fit: more than 1 MiB is held ahead then.
	if ahead < 1<<20 {
		t.Fatalf("only %d bytes charged ahead: no read-ahead at all", ahead)
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(head, rest...), data) {
		t.Fatal("the stream read through the budget differs from the backup")
	}
	bud.mu.Lock()
	held, peak := bud.held, bud.peak
	bud.mu.Unlock()
	if held != 0 || peak > readAhead {
		t.Fatalf("after the whole stream: %d bytes held, peak %d; budget %d", held, peak, readAhead)
	}
	if got := cb.got.Load(); got < int64(len(data))/2 {
		t.Fatalf("read %d bytes from the backend for a %d-byte stream", got, len(data))
	}
}

// Closing a reader whose read-ahead waits for room ends every goroutine
// it started (goleak), and the reads stop there.
func TestReaderClosedWhileStalledEndsItsReads(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, cb, m, _ := budgetStore(t)
	bud := newReadBudget(readAhead)
	blocked := blockedSignal(bud)
	r := s.readerWithin(m, bud)
	if _, err := r.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	waitBlocked(t, blocked)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	got := cb.got.Load()
	if got > readAhead+maxChunk {
		t.Fatalf("read %d bytes from the backend before the close", got)
	}
	if _, err := r.Read(make([]byte, 1)); err == nil {
		// A closed reader may still hand out what it holds; it must end.
		if _, err := io.Copy(io.Discard, r); err != nil {
			t.Fatal(err)
		}
	}
	if after := cb.got.Load(); after != got {
		t.Fatalf("the backend was read after the close: %d then %d bytes", got, after)
	}
}

// A budget smaller than a chunk still gives the whole stream: a group is
// started alone when nothing is held.
func TestReaderBudgetSmallerThanAChunk(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, _, m, data := budgetStore(t)
	bud := newReadBudget(16 << 10)
	r := s.readerWithin(m, bud)
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("err %v, equal %v", err, bytes.Equal(got, data))
	}
	if bud.peak > 2*maxChunk+(1<<10) {
		t.Fatalf("peak %d bytes held with a 16 KiB budget: more than one chunk's read and bytes", bud.peak)
	}
}

// ReaderAhead (a transfer's restore from the bucket) reads the backup
// exactly with larger ranged reads than Reader: fewer Gets for the same
// bytes.
func TestReaderAheadReadsLarger(t *testing.T) {
	s, cb, m, data := budgetStore(t)
	count := func(r io.ReadCloser) int64 {
		t.Helper()
		defer r.Close()
		cb.gets.Store(0)
		got, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatal("the stream differs from the backup")
		}
		return cb.gets.Load()
	}
	small, large := count(s.Reader(m)), count(s.ReaderAhead(m, 64<<20))
	if large >= small {
		t.Fatalf("ReaderAhead made %d Gets, Reader %d: no larger reads", large, small)
	}
	t.Logf("Gets for a %d-byte backup: Reader %d, ReaderAhead(64 MiB) %d", len(data), small, large)
}
