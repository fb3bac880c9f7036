package chunkstore

import (
	"archive/tar"
	"errors"
	"io"
	"sync"
)

// Reader returns the tar stream of backup m. Every chunk is checked
// against its hash as it is read; a damaged one ends the stream with a
// *ChunkError. Chunks are read, decompressed and hashed ahead, on several
// cores, in order.
func (s *Store) Reader(m Manifest) io.ReadCloser {
	const ahead = 8
	r := &reader{out: make(chan chan result, ahead), stop: make(chan struct{})}
	go func() {
		defer close(r.out)
		var off int64
		for _, c := range m.Chunks {
			ch := make(chan result, 1)
			select {
			case r.out <- ch:
			case <-r.stop:
				return
			}
			go func(c Chunk, off int64) {
				b, err := s.readChunk(c, off)
				ch <- result{b, err}
			}(c, off)
			off += c.Len
		}
	}()
	return r
}

type result struct {
	b   []byte
	err error
}

type reader struct {
	out  chan chan result
	stop chan struct{}
	once sync.Once
	buf  []byte
	err  error
}

func (r *reader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		ch, ok := <-r.out
		if !ok {
			r.err = io.EOF
			return 0, io.EOF
		}
		res := <-ch
		if res.err != nil {
			r.err = res.err
			r.Close()
			return 0, res.err
		}
		r.buf = res.b
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Close stops the reading ahead.
func (r *reader) Close() error {
	r.once.Do(func() { close(r.stop) })
	return nil
}

// Damage is a backup with damaged chunks and the entries they touch.
type Damage struct {
	Server, Backup string
	Chunks         []*ChunkError
	Files          []string // tar entry names whose header or data lie in a damaged chunk
}

// Check reads every chunk of m. When some are damaged it returns the
// damage, naming the files affected; nil when the backup is whole.
func (s *Store) Check(m Manifest) *Damage {
	d := &Damage{Server: m.Server, Backup: m.Backup}
	var off int64
	for _, c := range m.Chunks {
		if _, err := s.readChunk(c, off); err != nil {
			var ce *ChunkError
			if errors.As(err, &ce) {
				d.Chunks = append(d.Chunks, ce)
			}
		}
		off += c.Len
	}
	if len(d.Chunks) == 0 {
		return nil
	}
	d.Files = s.affected(m, d.Chunks)
	return d
}

// affected lists the entries of m's tar stream that overlap a damaged
// chunk. The stream is parsed with the damaged chunks read as zeros.
func (s *Store) affected(m Manifest, bad []*ChunkError) []string {
	type span struct{ from, to int64 }
	var spans []span
	badSet := map[int64]bool{}
	var off int64
	for _, c := range m.Chunks {
		for _, b := range bad {
			if b.Offset == off {
				spans = append(spans, span{off, off + c.Len})
				badSet[off] = true
			}
		}
		off += c.Len
	}
	hit := func(from, to int64) bool {
		for _, sp := range spans {
			if from < sp.to && to > sp.from {
				return true
			}
		}
		return false
	}
	cr := &countingReader{r: &zeroingReader{s: s, m: m, bad: badSet}}
	seen := map[string]bool{}
	var names []string
	prevEnd, prevName := int64(0), "the start"
	for cr.n < m.Size {
		tr := tar.NewReader(cr)
		n0 := cr.n
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			dstart := cr.n
			// Entries whose headers were in a damaged chunk cannot be
			// read: the gap before this one names where they were.
			if dstart-512 > prevEnd && hit(prevEnd, dstart-512) {
				names = append(names, "(unreadable entries after "+prevName+")")
			}
			prevEnd, prevName = dstart+(h.Size+511)/512*512, h.Name
			if hit(dstart-512, dstart+h.Size) && !seen[h.Name] {
				seen[h.Name] = true
				names = append(names, h.Name)
			}
		}
		if cr.n == n0 {
			break
		}
	}
	return names
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// zeroingReader reads the stream with damaged chunks as zeros.
type zeroingReader struct {
	s   *Store
	m   Manifest
	bad map[int64]bool
	i   int
	off int64
	buf []byte
}

func (z *zeroingReader) Read(p []byte) (int, error) {
	for len(z.buf) == 0 {
		if z.i >= len(z.m.Chunks) {
			return 0, io.EOF
		}
		c := z.m.Chunks[z.i]
		b, err := z.s.readChunk(c, z.off)
		if err != nil || z.bad[z.off] {
			b = make([]byte, c.Len)
		}
		z.buf = b
		z.i++
		z.off += c.Len
	}
	n := copy(p, z.buf)
	z.buf = z.buf[n:]
	return n, nil
}
