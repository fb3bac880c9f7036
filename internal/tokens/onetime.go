package tokens

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/wharf/wharf/internal/atomicfile"
)

// OneTimeStore accepts each one-time id (a token's unique_id) once, and
// remembers it until the token's exp has passed, across restarts.
//
// Records ("<exp unix seconds> <quoted id>\n") are appended to a file and
// fsynced before Use returns nil, so a kill -9 right after a successful
// Use cannot reopen the id. Expired records are compacted away when the
// store opens and when the file has grown to twice the live ids (and at
// least 1024 records) since the last compaction (temp file,
// fsync, rename, directory fsync). A torn last line (a crash in the middle
// of a write, before Use returned) is ignored. Uses are serialised; each
// costs one fsync.
type OneTimeStore struct {
	mu    sync.Mutex
	path  string
	now   func() time.Time
	f     *os.File
	ids   map[string]time.Time
	lines int // records in the file
	// nextCompact is the record count that triggers the next compaction.
	nextCompact int
}

// OpenOneTimeStore opens (creating it, mode 0600) the store file at path.
// now is the clock (time.Now when nil).
func OpenOneTimeStore(path string, now func() time.Time) (*OneTimeStore, error) {
	if now == nil {
		now = time.Now
	}
	s := &OneTimeStore{path: path, now: now, ids: map[string]time.Time{}}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("one-time store: %w", err)
	}
	t := now()
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break // torn last record: its Use never returned nil
		}
		line := b[:i]
		b = b[i+1:]
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		sec, err1 := strconv.ParseInt(string(line[:sp]), 10, 64)
		id, err2 := strconv.Unquote(string(line[sp+1:]))
		if err1 != nil || err2 != nil {
			continue
		}
		exp := time.Unix(sec, 0)
		if exp.After(t) && exp.After(s.ids[id]) {
			s.ids[id] = exp
		}
	}
	if err := s.compact(); err != nil {
		return nil, err
	}
	return s, nil
}

// Use records id as used until exp. It returns ErrUsed when id was already
// used (and has not expired), ErrMissingClaim for an empty id, ErrExpired
// when exp has passed, and a plain error when the record could not be made
// durable (the id then stays refused in this process; refuse the request).
func (s *OneTimeStore) Use(id string, exp time.Time) error {
	if id == "" {
		return claimErr(ErrMissingClaim, "unique_id")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return errors.New("one-time store: closed")
	}
	now := s.now()
	if !now.Before(exp) {
		return ErrExpired
	}
	if old, ok := s.ids[id]; ok && old.After(now) {
		return ErrUsed
	}
	// Round up so the id is remembered at least until exp.
	sec := exp.Unix()
	if exp.After(time.Unix(sec, 0)) {
		sec++
	}
	s.ids[id] = time.Unix(sec, 0)
	rec := strconv.FormatInt(sec, 10) + " " + strconv.Quote(id) + "\n"
	if _, err := io.WriteString(s.f, rec); err != nil {
		return fmt.Errorf("one-time store: write: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("one-time store: sync: %w", err)
	}
	s.lines++
	if s.lines >= s.nextCompact {
		// The id is durable already; a failed compaction only keeps the
		// old file, which is still correct.
		if err := s.compact(); err != nil {
			s.nextCompact = s.lines + 1024
		}
	}
	return nil
}

// Len returns the number of ids remembered.
func (s *OneTimeStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// Close closes the store file.
func (s *OneTimeStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

func (s *OneTimeStore) prune(now time.Time) {
	for id, exp := range s.ids {
		if !exp.After(now) {
			delete(s.ids, id)
		}
	}
}

// compact rewrites the file with the live ids only and reopens it for
// appending. Called with mu held (or before the store is shared).
func (s *OneTimeStore) compact() error {
	s.prune(s.now())
	err := atomicfile.Write(s.path, 0o600, func(out io.Writer) error {
		w := bufio.NewWriter(out)
		for id, exp := range s.ids {
			_, _ = w.WriteString(strconv.FormatInt(exp.Unix(), 10) + " " + strconv.Quote(id) + "\n")
		}
		return w.Flush()
	})
	if err != nil {
		return fmt.Errorf("one-time store: compact: %w", err)
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("one-time store: %w", err)
	}
	if s.f != nil {
		_ = s.f.Close()
	}
	s.f = f
	s.lines = len(s.ids)
	s.nextCompact = max(1024, 2*len(s.ids))
	return nil
}
