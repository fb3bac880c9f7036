// Package activity queues the activity records the backend wants to know
// about (power actions and console commands from the websocket, later SFTP
// and uploads) and delivers them with POST /activity in bounded batches.
//
// The queue is an append-only file of JSON lines plus a cursor file that
// holds the offset of the first record not yet delivered, so a restart
// loses nothing and a delivered record is never sent again (attacks.md D4:
// an unbounded resend filled the panel's database). The cursor advances
// after each delivered batch; once everything is delivered, or the
// delivered head grows large, the file is compacted into a new generation
// and the cursor switched atomically.
package activity

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wharf/wharf/internal/atomicfile"
	"github.com/wharf/wharf/internal/panel"
)

// SendFunc delivers one batch (panel.Client.SendActivity).
type SendFunc func(ctx context.Context, batch []panel.Activity) error

// compactAfter: the delivered head of the file is cut off once it is this
// large and larger than what remains.
const compactAfter = 1 << 20

type cursor struct {
	Gen    int64 `json:"gen"`
	Offset int64 `json:"offset"`
}

// Queue is the persistent activity queue. Its methods are safe for
// concurrent use.
type Queue struct {
	dir string
	log *slog.Logger

	mu     sync.Mutex // guards the fields below and the file
	f      *os.File   // the current generation, opened for appending
	cur    cursor
	size   int64
	closed bool

	mergeWindow time.Duration // SFTP records within one window merge

	flushMu sync.Mutex // one delivery at a time
}

// Option changes a Queue at Open.
type Option func(*Queue)

// WithMergeWindow replaces DefaultMergeWindow, the span of time whose SFTP
// records merge (the end-to-end tests widen it so as not to wait for a
// minute to turn); d <= 0 keeps the default.
func WithMergeWindow(d time.Duration) Option {
	return func(q *Queue) {
		if d > 0 {
			q.mergeWindow = d
		}
	}
}

// Open opens (or creates) the queue kept in dir.
func Open(dir string, log *slog.Logger, opts ...Option) (*Queue, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	q := &Queue{dir: dir, log: log, mergeWindow: DefaultMergeWindow}
	for _, o := range opts {
		o(q)
	}
	data, err := os.ReadFile(q.cursorPath())
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &q.cur); err != nil {
			return nil, fmt.Errorf("activity: cursor: %w", err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	f, err := os.OpenFile(q.genPath(q.cur.Gen), os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	q.f = f
	if err := q.repairTail(); err != nil {
		f.Close()
		return nil, err
	}
	q.removeStale()
	return q, nil
}

func (q *Queue) cursorPath() string { return filepath.Join(q.dir, "cursor.json") }
func (q *Queue) genPath(gen int64) string {
	return filepath.Join(q.dir, "queue-"+strconv.FormatInt(gen, 10)+".jsonl")
}

// repairTail cuts a record that a crash left half written.
func (q *Queue) repairTail() error {
	st, err := q.f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	end := size
	buf := make([]byte, 4096)
	for end > 0 {
		n := int64(len(buf))
		if n > end {
			n = end
		}
		if _, err := q.f.ReadAt(buf[:n], end-n); err != nil {
			return err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			end = end - n + int64(i) + 1
			break
		}
		end -= n
	}
	if end != size {
		q.log.Warn("activity queue: dropping a partly written record", "bytes", size-end)
		if err := q.f.Truncate(end); err != nil {
			return err
		}
	}
	q.size = end
	if q.cur.Offset > q.size {
		q.cur.Offset = q.size
	}
	return nil
}

// removeStale deletes generations other than the current one (left by a
// crash during compaction).
func (q *Queue) removeStale() {
	entries, _ := os.ReadDir(q.dir)
	keep := filepath.Base(q.genPath(q.cur.Gen))
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, "queue-") && n != keep {
			_ = os.Remove(filepath.Join(q.dir, n))
		}
	}
}

// Record appends one record. It does not wait for the disk to sync: a
// crash may lose the last records, never corrupt the queue.
func (q *Queue) Record(a panel.Activity) {
	if a.Metadata == nil {
		a.Metadata = map[string]any{}
	}
	line, err := json.Marshal(a)
	if err != nil {
		q.log.Warn("activity record not queued", "event", a.Event, "error", err)
		return
	}
	line = append(line, '\n')
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	n, err := q.f.Write(line)
	q.size += int64(n)
	if err != nil {
		q.log.Warn("activity record not queued", "event", a.Event, "error", err)
		if n > 0 { // never leave half a record behind
			if terr := q.f.Truncate(q.size - int64(n)); terr == nil {
				q.size -= int64(n)
			}
		}
	}
}

// PendingBytes reports how many bytes of records wait for delivery.
func (q *Queue) PendingBytes() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.size - q.cur.Offset
}

// Flush delivers every pending record in batches of at most batch records,
// one request per batch, and stops at the first failure (the records of a
// failed batch stay queued). It returns how many records were delivered.
func (q *Queue) Flush(ctx context.Context, send SendFunc, batch int) (int, error) {
	if batch <= 0 {
		batch = 100
	}
	q.flushMu.Lock()
	defer q.flushMu.Unlock()
	sent := 0
	for ctx.Err() == nil {
		recs, consumed, err := q.next(batch)
		if err != nil {
			return sent, err
		}
		if consumed == 0 {
			break
		}
		if len(recs) > 0 {
			if err := send(ctx, recs); err != nil {
				return sent, err
			}
		}
		if err := q.advance(consumed); err != nil {
			return sent, err
		}
		sent += len(recs)
	}
	return sent, q.compact()
}

// next reads up to n records from the cursor; consumed is the number of
// bytes they (and any corrupt lines skipped among them) take.
func (q *Queue) next(n int) ([]panel.Activity, int64, error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil, 0, errors.New("activity: queue closed")
	}
	off, size, f := q.cur.Offset, q.size, q.f
	q.mu.Unlock()
	if off >= size {
		return nil, 0, nil
	}
	// Compaction runs under flushMu too, so f stays valid while we read.
	r := bufio.NewReaderSize(io.NewSectionReader(f, off, size-off), 64<<10)
	var (
		out      []panel.Activity
		consumed int64
		merge    = newMerger(q.mergeWindow)
		raw      int
	)
	for len(out) < n && raw < n*mergeFactor {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// An overlong line: skip it whole.
			skipped := int64(len(line))
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				skipped += int64(len(line))
			}
			consumed += skipped
			q.log.Warn("activity queue: skipping an overlong record", "bytes", skipped)
			continue
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, err
		}
		consumed += int64(len(line))
		var a panel.Activity
		if err := json.Unmarshal(line, &a); err != nil {
			q.log.Warn("activity queue: skipping a corrupt record", "error", err)
			continue
		}
		raw++
		if merge.into(out, a) {
			continue
		}
		out = append(out, a)
		merge.added(out)
	}
	return out, consumed, nil
}

// advance moves the cursor past delivered bytes and persists it.
func (q *Queue) advance(consumed int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cur.Offset += consumed
	return q.saveCursor(q.cur)
}

func (q *Queue) saveCursor(c cursor) error {
	data, _ := json.Marshal(c)
	return atomicfile.WriteFile(q.cursorPath(), data, 0o600)
}

// compact starts a new generation holding only the undelivered records
// when everything was delivered or the delivered head is large.
func (q *Queue) compact() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.cur.Offset == 0 {
		return nil
	}
	if q.cur.Offset < q.size && (q.cur.Offset < compactAfter || q.cur.Offset < q.size-q.cur.Offset) {
		return nil
	}
	next := cursor{Gen: q.cur.Gen + 1}
	path := q.genPath(next.Gen)
	nf, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	tail := q.size - q.cur.Offset
	if tail > 0 {
		if _, err := io.Copy(nf, io.NewSectionReader(q.f, q.cur.Offset, tail)); err != nil {
			nf.Close()
			os.Remove(path)
			return err
		}
	}
	if err := nf.Sync(); err != nil {
		nf.Close()
		os.Remove(path)
		return err
	}
	// The cursor names the generation: until it is replaced, the old file
	// and offset stay authoritative.
	if err := q.saveCursor(next); err != nil {
		nf.Close()
		os.Remove(path)
		return err
	}
	old := q.genPath(q.cur.Gen)
	q.f.Close()
	q.f, q.cur, q.size = nf, next, tail
	_ = os.Remove(old)
	return nil
}

// Run delivers the queue every interval() until ctx ends.
func (q *Queue) Run(ctx context.Context, send SendFunc, interval func() time.Duration, batch func() int) {
	for {
		d := interval()
		if d <= 0 {
			d = time.Minute
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		n, err := q.Flush(ctx, send, batch())
		if err != nil && ctx.Err() == nil {
			q.log.Warn("activity delivery failed; will retry", "delivered", n, "error", err)
		} else if n > 0 {
			q.log.Debug("activity delivered", "records", n)
		}
	}
}

// Close closes the queue file; later records are dropped.
func (q *Queue) Close() error {
	q.flushMu.Lock()
	defer q.flushMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	return q.f.Close()
}
