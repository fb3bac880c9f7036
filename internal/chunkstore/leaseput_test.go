package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

// leaseFlaky is a local backend whose lease Puts fail a number of times
// first, as an S3-compatible server's transient refusals do.
type leaseFlaky struct {
	*LocalBackend
	mu    sync.Mutex
	fails int
}

var errTransient = errors.New("api error ExistingObjectIsDirectory: Existing Object is a directory")

func (b *leaseFlaky) Put(ctx context.Context, name string, data []byte) error {
	if strings.HasPrefix(name, writersPrefix) {
		b.mu.Lock()
		fail := b.fails > 0
		if fail {
			b.fails--
		}
		b.mu.Unlock()
		if fail {
			return errTransient
		}
	}
	return b.LocalBackend.Put(ctx, name, data)
}

// A writer lease whose first Puts fail transiently is taken all the same,
// and the backup is written; one that keeps failing fails the write with
// the backend's error (the control).
func TestLeasePutRetried(t *testing.T) {
	for _, c := range []struct {
		fails int
		ok    bool
	}{{leasePutTries - 1, true}, {leasePutTries, false}} {
		local, err := NewLocalBackend(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		b := &leaseFlaky{LocalBackend: local}
		s, err := OpenBackend(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ClaimShared(context.Background(), "node-a"); err != nil {
			t.Fatal(err)
		}
		s.SetShared("node-a")
		b.mu.Lock()
		b.fails = c.fails
		b.mu.Unlock()
		data := tarOf(t, randomFiles(3, 4<<10, 71))
		_, err = s.Write("srv", "bk", bytes.NewReader(data))
		if c.ok && err != nil {
			t.Fatalf("%d transient failures: %v", c.fails, err)
		}
		if !c.ok && !errors.Is(err, errTransient) {
			t.Fatalf("%d failures: %v, want the backend's error", c.fails, err)
		}
		if c.ok {
			if got := readAll(t, s, "srv", "bk"); !bytes.Equal(got, data) {
				t.Fatal("the backup reads back wrong")
			}
		}
		s.Close()
	}
}
