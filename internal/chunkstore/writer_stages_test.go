package chunkstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

// packGate is a local backend whose Puts of packs wait until their
// context ends (entered says one is waiting), or fail with failPacks.
type packGate struct {
	*LocalBackend
	entered   chan struct{}
	failPacks error
	packPuts  atomic.Int32
}

func (g *packGate) Put(ctx context.Context, name string, data []byte) error {
	if !strings.HasPrefix(name, "packs/") {
		return g.LocalBackend.Put(ctx, name, data)
	}
	g.packPuts.Add(1)
	if g.failPacks != nil {
		return g.failPacks
	}
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

func newGatedStore(t *testing.T, failPacks error) (*Store, *packGate) {
	t.Helper()
	lb, err := NewLocalBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	g := &packGate{LocalBackend: lb, entered: make(chan struct{}, 1), failPacks: failPacks}
	s, err := OpenBackend(context.Background(), g)
	if err != nil {
		t.Fatal(err)
	}
	return s, g
}

// writeRandom writes n random bytes to w, a MiB at a time, and returns
// the first error.
func writeRandom(w *Writer, n int, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 0))
	buf := make([]byte, 1<<20)
	for n > 0 {
		fillRandom(r, buf)
		k := min(n, len(buf))
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// The writer's stores run under the context WriteBackup is given: when it
// ends, a pack's Put that waits on it returns, the stages stop, nothing
// is committed and no goroutine is left. (Before the stages, the writer
// stored a context.Background(): the Put waited for ever.)
func TestWriteBackupStopsWithItsContext(t *testing.T) {
	before := goleak.IgnoreCurrent()
	s, g := newGatedStore(t, nil)
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.WriteBackup(ctx, "srv", "b1", func(w *Writer) error {
			return writeRandom(w, 48<<20, 1)
		})
		done <- err
	}()
	<-g.entered // a pack is being stored: the stages are all running
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the backup whose context ended returned %v, want context.Canceled", err)
	}
	if _, err := s.Manifest("srv", "b1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a manifest of the cancelled backup: %v", err)
	}
	s.mu.Lock()
	inflight := len(s.inflight)
	s.mu.Unlock()
	if inflight != 0 {
		t.Fatalf("%d packs still in flight after the backup ended", inflight)
	}
	s.Close()
	goleak.VerifyNone(t, before)

	// The control: the same backup, its context alive, is committed.
	s2, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	m, err := s2.WriteBackup(context.Background(), "srv", "b1", func(w *Writer) error {
		return writeRandom(w, 48<<20, 1)
	})
	if err != nil || m.Size != 48<<20 {
		t.Fatalf("the control backup: size %d, %v", m.Size, err)
	}
}

// An error of one stage (here the uploaders': a pack's Put fails) stops
// the others: the caller's writes fail with it, the commit returns it,
// nothing is committed and no goroutine is left.
func TestWriterStageErrorStopsTheOthers(t *testing.T) {
	before := goleak.IgnoreCurrent()
	broken := errors.New("the disk is gone")
	s, g := newGatedStore(t, broken)
	defer s.Close()
	var wrote error
	_, err := s.WriteBackup(context.Background(), "srv", "b1", func(w *Writer) error {
		// Far more than the packs in flight: the writes fail before the
		// end once the first Put failed.
		wrote = writeRandom(w, 256<<20, 2)
		return nil
	})
	if !errors.Is(wrote, broken) {
		t.Fatalf("the writes after a failed Put returned %v, want %v", wrote, broken)
	}
	if !errors.Is(err, broken) {
		t.Fatalf("the commit after a failed Put returned %v, want %v", err, broken)
	}
	if n := g.packPuts.Load(); n < 1 || n > 2*packUploaders+2 {
		t.Fatalf("%d packs stored after the first failed: the stages went on", n)
	}
	if _, err := s.Manifest("srv", "b1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a manifest of the failed backup: %v", err)
	}
	s.mu.Lock()
	inflight := len(s.inflight)
	s.mu.Unlock()
	if inflight != 0 {
		t.Fatalf("%d packs still in flight after the backup failed", inflight)
	}
	s.Close()
	goleak.VerifyNone(t, before)
}
