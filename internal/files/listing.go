package files

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"slices"
	"time"

	"github.com/wharf/wharf/internal/sandbox"
)

// A listing is streamed: the directory is read a buffer of names at a time
// and each entry is typed and encoded as it comes, so that a directory of
// millions of entries (which a game process can make) costs the daemon a
// bounded amount of memory per listing instead of every stat object and the
// whole JSON document.
//
// Order. The panels sort the listing on their side (Pterodactyl's
// FileManagerContainer sorts by name then puts folders first; Pelican's
// table sorts itself), and Wings' own order is inconsistent, so no client
// can rely on it; but Wharf has always answered "directories first, then
// files, each by name" (docs/compatibility.md) and keeps doing so whenever
// the names fit in sortBudget: only the names are held for the sort (in one
// byte arena, 8 bytes of index each: about 80,000 names of 16 bytes fit),
// then each entry is stat-ed and encoded in that order. A directory whose
// names do not fit is listed in the order the filesystem gives, so that
// memory stays bounded whatever the directory holds. The budget is small
// because the garbage collector lets the heap grow to twice what is live:
// measured on a 200,000-entry directory, one listing grew the daemon's
// resident memory by 19 MiB with a 4 MiB budget and by 2 MiB unsorted.
const sortBudget = 2 << 20

// listBatch is how many entries are listed between two checks of the
// request's context.
const listBatch = 256

// flushEvery is how often a slow listing (a cold disk) pushes what it has
// encoded to the client, so that neither the client nor a proxy sees an
// idle connection.
const flushEvery = time.Second

// Listing is a directory open for listing (OpenListing); Close releases it.
type Listing struct {
	r    *sandbox.DirReader
	head []byte
	// sortBudget is the package's, lowered by tests.
	sortBudget int
	// Extra entries are listed first (the backups folder at the root).
	Extra []Stat
}

// OpenListing opens the directory dir for listing: a missing name, one
// outside the root, and anything but a directory (an in-root link to a
// directory is followed) are refused here, before anything is answered.
func (m *Reader) OpenListing(dir string) (*Listing, error) {
	fi, err := m.FS.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, ErrNotDirectory
	}
	r, err := m.FS.OpenDirReader(dir)
	if err != nil {
		return nil, err
	}
	return &Listing{r: r, head: make([]byte, sniffLen), sortBudget: sortBudget}, nil
}

// Close releases the directory.
func (l *Listing) Close() error { return l.r.Close() }

// List describes the entries of the directory dir, in the listing's order
// (see sortBudget). It holds every entry: the API streams instead
// (Listing.WriteJSON).
func (m *Reader) List(dir string) ([]Stat, error) {
	l, err := m.OpenListing(dir)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	out := []Stat{}
	err = l.Each(context.Background(), func(s Stat) error {
		out = append(out, s)
		return nil
	})
	return out, err
}

// Each calls fn with the description of each entry, in the listing's order
// (see sortBudget). Entries that vanish while listed are left out. It stops
// with ctx's error when ctx is done, and with fn's error.
func (l *Listing) Each(ctx context.Context, fn func(Stat) error) error {
	names := nameSet{budget: l.sortBudget}
	complete, err := names.read(ctx, l.r)
	if err != nil {
		return err
	}
	if complete {
		names.sort()
	}
	n := 0
	emit := func(name string) error {
		if n++; n%listBatch == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		st, ok := l.stat(name)
		if !ok {
			return nil
		}
		return fn(st)
	}
	for i := range names.index {
		if err := emit(names.name(i)); err != nil {
			return err
		}
	}
	if complete {
		return nil
	}
	// The budget ran out: the rest comes straight from the directory.
	for {
		name, _, err := l.r.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := emit(name); err != nil {
			return err
		}
	}
}

// stat describes the entry name; ok is false when it is gone.
func (l *Listing) stat(name string) (Stat, bool) {
	fi, err := l.r.Lstat(name)
	if err != nil {
		return Stat{}, false
	}
	mime := MimeBinary
	switch {
	case fi.IsDir():
		mime = MimeDirectory
	case fi.Mode().IsRegular():
		mime = l.mimeOf(fi)
	}
	return NewStat(fi, mime), true
}

// mimeOf types a regular file of the listing (see Reader.mimeOf); a denied
// or unreadable file is binary.
func (l *Listing) mimeOf(fi fs.FileInfo) string {
	if fi.Size() == 0 {
		return MimeText
	}
	if t := mimeByName(fi.Name()); t != "" {
		return t
	}
	n, err := l.r.ReadHead(fi.Name(), l.head)
	if err != nil {
		return MimeBinary
	}
	return DetectMime(fi.Name(), l.head[:n])
}

// WriteJSON writes the listing to w as one JSON array of Stat objects,
// byte for byte what json.Encoder gives for the whole []Stat (a final
// newline included), but entry by entry through a 32 KiB buffer. When w
// has a Flush() error method it is called at least every flushEvery while
// entries come. An error means the array was not finished; whether some of
// it reached w is the caller's to know.
func (l *Listing) WriteJSON(ctx context.Context, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 32<<10)
	var entry bytes.Buffer
	enc := json.NewEncoder(&entry)
	lastFlush := time.Now()
	first := true
	put := func(s Stat) error {
		entry.Reset()
		if err := enc.Encode(s); err != nil {
			return err
		}
		sep := byte(',')
		if first {
			sep, first = '[', false
		}
		_ = bw.WriteByte(sep)
		// Encode ends each value with a newline, which an array has not.
		if _, err := bw.Write(bytes.TrimSuffix(entry.Bytes(), []byte("\n"))); err != nil {
			return err
		}
		if time.Since(lastFlush) >= flushEvery {
			lastFlush = time.Now()
			return flush(bw, w)
		}
		return nil
	}
	for _, s := range l.Extra {
		if err := put(s); err != nil {
			return err
		}
	}
	if err := l.Each(ctx, put); err != nil {
		return err
	}
	if first {
		_ = bw.WriteByte('[')
	}
	_, _ = bw.WriteString("]\n")
	return bw.Flush()
}

// flush pushes what bw holds to w, and w's own buffer on when it has one.
func flush(bw *bufio.Writer, w io.Writer) error {
	if err := bw.Flush(); err != nil {
		return err
	}
	if f, ok := w.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

// nameSet holds the names of a directory for sorting them: every name in
// one byte arena and, per name, 8 bytes of index (directory bit, offset,
// length), so that a name costs its length plus 8 bytes and the garbage
// collector has no pointer to follow.
type nameSet struct {
	budget int // bytes of arena and index capacity, at most
	arena  []byte
	index  []uint64
}

const (
	nameDirBit  = 1 << 63
	nameLenBits = 16
)

// read reads the directory's names until its end (complete) or until one
// more would take the set past its budget: that name is kept all the same
// (complete is false and the rest of the directory is still unread).
func (s *nameSet) read(ctx context.Context, r *sandbox.DirReader) (complete bool, err error) {
	for i := 1; ; i++ {
		if i%listBatch == 0 {
			if err := ctx.Err(); err != nil {
				return false, err
			}
		}
		name, isDir, err := r.Next()
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		s.add(name, isDir)
		if cap(s.arena)+8*cap(s.index) > s.budget {
			return false, nil
		}
	}
}

func (s *nameSet) add(name string, isDir bool) {
	e := uint64(len(s.arena))<<nameLenBits | uint64(len(name))
	if isDir {
		e |= nameDirBit
	}
	s.arena = append(s.arena, name...)
	s.index = append(s.index, e)
}

func (s *nameSet) bytes(e uint64) []byte {
	off := (e &^ nameDirBit) >> nameLenBits
	n := e & (1<<nameLenBits - 1)
	return s.arena[off : off+n]
}

func (s *nameSet) name(i int) string { return string(s.bytes(s.index[i])) }

// sort puts directories first, then the other entries, each group by name
// (bytes, as strings.Compare orders them).
func (s *nameSet) sort() {
	slices.SortFunc(s.index, func(a, b uint64) int {
		if da, db := a&nameDirBit != 0, b&nameDirBit != 0; da != db {
			if da {
				return -1
			}
			return 1
		}
		return bytes.Compare(s.bytes(a), s.bytes(b))
	})
}
