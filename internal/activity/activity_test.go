package activity

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/testutil/wait"
)

func record(i int) panel.Activity {
	u := "user-1"
	return panel.Activity{
		User: &u, Server: "2b4c6d8e-0a1b-4c3d-8e5f-7a9b1c3d5e7f", Event: "server:console.command",
		Metadata: map[string]any{"command": "say " + strconv.Itoa(i)}, IP: "192.0.2.7",
		Timestamp: time.Unix(1700000000+int64(i), 0).UTC(),
	}
}

// collector records delivered batches and can fail on demand.
type collector struct {
	mu      sync.Mutex
	seen    map[string]int
	batches int
	maxLen  int
	failAt  int // fail the batch with this number (1-based); 0 never
}

func (c *collector) send(_ context.Context, b []panel.Activity) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches++
	if c.batches == c.failAt {
		return errors.New("injected failure")
	}
	c.maxLen = max(c.maxLen, len(b))
	for _, a := range b {
		c.seen[a.Metadata["command"].(string)]++
	}
	return nil
}

// TestActivityEachRecordOnceOver100k queues more than 100 000 records and
// delivers them in batches of 100 across a failed batch and a restart: every
// record arrives exactly once and the queue ends empty and compacted.
func TestActivityEachRecordOnceOver100k(t *testing.T) {
	defer goleak.VerifyNone(t)
	const total = 100_123
	dir := t.TempDir()
	q, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range total {
		q.Record(record(i))
	}
	c := &collector{seen: map[string]int{}, failAt: 300}
	n, err := q.Flush(context.Background(), c.send, 100)
	if err == nil || n != 299*100 {
		t.Fatalf("first flush: %d records, err %v; want 29900 and the injected failure", n, err)
	}
	// Restart: the cursor survives.
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	n2, err := q.Flush(context.Background(), c.send, 100)
	if err != nil {
		t.Fatal(err)
	}
	if n+n2 != total {
		t.Fatalf("delivered %d, want %d", n+n2, total)
	}
	if len(c.seen) != total {
		t.Fatalf("%d distinct records delivered, want %d", len(c.seen), total)
	}
	for k, v := range c.seen {
		if v != 1 {
			t.Fatalf("record %q delivered %d times", k, v)
		}
	}
	if c.maxLen > 100 {
		t.Fatalf("a batch had %d records, limit 100", c.maxLen)
	}
	if p := q.PendingBytes(); p != 0 {
		t.Fatalf("pending bytes after delivery = %d", p)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, _ := e.Info(); filepath.Ext(e.Name()) == ".jsonl" && info.Size() != 0 {
			t.Fatalf("queue file %s still holds %d bytes after full delivery", e.Name(), info.Size())
		}
	}
	// Nothing is sent twice by a later run.
	if n3, err := q.Flush(context.Background(), c.send, 100); n3 != 0 || err != nil {
		t.Fatalf("third flush sent %d (%v)", n3, err)
	}
}

func TestActivityTornTailAndRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	q, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	q.Record(record(1))
	q.Record(record(2))
	q.Close()
	// A crash in the middle of an append leaves half a line.
	f, err := os.OpenFile(filepath.Join(dir, "queue-0.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"user":"half`)
	f.Close()
	q, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	q.Record(record(3))
	c := &collector{seen: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.Run(ctx, c.send, func() time.Duration { return 10 * time.Millisecond }, func() int { return 2 })
	}()
	wait.For(t, 5*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.seen) == 3
	}, "3 records delivered")
	cancel()
	<-done
	if c.batches != 2 {
		t.Fatalf("%d batches for 3 records of batch size 2", c.batches)
	}
}
