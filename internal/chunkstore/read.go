package chunkstore

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"runtime"
	"sync"
)

// lookup finds blob h; on a miss the packs no index names are read once
// (rescan), so a lost or damaged index object costs a scan, not a backup.
func (s *Store) lookup(h blobID) (blobLoc, bool) {
	s.mu.Lock()
	loc, ok := s.idx[h]
	s.mu.Unlock()
	if ok {
		return loc, true
	}
	s.rescan(context.Background())
	s.mu.Lock()
	defer s.mu.Unlock()
	loc, ok = s.idx[h]
	return loc, ok
}

// rescan reads the trailers of the packs no index names (and no running
// backup writes) into the in-memory index. It writes nothing: the next GC
// stores an index naming those that a manifest uses.
func (s *Store) rescan(ctx context.Context) {
	if s.sharedMode() != nil {
		// Another node's backups: their index objects come first.
		_ = s.syncIndex(ctx)
	}
	for _, p := range s.unindexedPacks(ctx) {
		es, err := readPackIndex(ctx, s.b, packName(p.id), p.size)
		if err != nil {
			continue
		}
		s.mu.Lock()
		s.addPackLocked(p.id, es)
		s.rescued[p.id] = struct{}{}
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.rescans++
	s.mu.Unlock()
}

type packObj struct {
	id   string
	size int64
}

// unindexedPacks lists the packs that no blob of the index is in and no
// backup of this process is writing.
func (s *Store) unindexedPacks(ctx context.Context) []packObj {
	objs, err := s.b.List(ctx, "packs/")
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []packObj
	for _, o := range objs {
		id := packID(o.Name)
		_, in := s.packs[id]
		_, fl := s.inflight[id]
		if id != "" && !in && !fl {
			out = append(out, packObj{id, o.Size})
		}
	}
	return out
}

// verifyBlob decodes a stored blob and checks it against its hash.
func verifyBlob(raw []byte, c Chunk, h blobID) ([]byte, error) {
	b, err := decodeBlob(raw, int(c.Len))
	if err != nil {
		return nil, err
	}
	if sha256.Sum256(b) != h {
		return nil, errors.New("content does not match its hash")
	}
	return b, nil
}

// readChunk returns the plain bytes of chunk c, checked against its hash.
func (s *Store) readChunk(c Chunk, off int64) ([]byte, error) {
	fail := func(err error) ([]byte, error) { return nil, &ChunkError{Hash: c.Hash, Offset: off, Err: err} }
	h, err := parseHash(c.Hash)
	if err != nil {
		return fail(err)
	}
	loc, ok := s.lookup(h)
	if !ok {
		return fail(errors.New("not in the repository"))
	}
	raw, err := s.b.Get(context.Background(), packName(loc.pack), int64(loc.off), int64(loc.n))
	if errors.Is(err, fs.ErrNotExist) && (s.readOnly || s.sharedMode() != nil) && s.reload(context.Background()) == nil {
		// A reader beside the daemon, or a shared repository: a GC there
		// may have repacked it.
		if loc, ok = s.lookup(h); ok {
			raw, err = s.b.Get(context.Background(), packName(loc.pack), int64(loc.off), int64(loc.n))
		}
	}
	if err != nil {
		return fail(err)
	}
	b, err := verifyBlob(raw, c, h)
	if err != nil {
		return fail(err)
	}
	return b, nil
}

// A readGroup is chunks of a backup stored next to each other in one
// pack: one ranged Get reads them all.
type readGroup struct {
	pack     string
	from, to int64
	first    int // index of the first chunk in the manifest
	items    []groupItem
}

type groupItem struct {
	c   Chunk
	h   blobID
	off int64 // in the tar stream
	loc blobLoc
	ok  bool
}

// Coalescing: neighbours in a pack are read together when the gap between
// them is at most maxGap, up to maxGroup bytes per Get.
const (
	maxGap   = 64 << 10
	maxGroup = 8 << 20
)

// groups plans the reads of cs in order, up to limit bytes per Get.
func (s *Store) groups(cs []Chunk, limit int64) []readGroup {
	locs := s.locate(cs)
	var out []readGroup
	var off int64
	for i, c := range cs {
		it := groupItem{c: c, off: off}
		off += c.Len
		it.h, it.loc, it.ok = locs[i].h, locs[i].loc, locs[i].ok
		if n := len(out); n > 0 && it.ok {
			g := &out[n-1]
			start, end := int64(it.loc.off), int64(it.loc.off)+int64(it.loc.n)
			if g.pack == it.loc.pack && start >= g.to && start-g.to <= maxGap && end-g.from <= limit {
				g.to = end
				g.items = append(g.items, it)
				continue
			}
		}
		g := readGroup{first: i, items: []groupItem{it}}
		if it.ok {
			g.pack, g.from, g.to = it.loc.pack, int64(it.loc.off), int64(it.loc.off)+int64(it.loc.n)
		}
		out = append(out, g)
	}
	return out
}

type located struct {
	h   blobID
	loc blobLoc
	ok  bool
}

// locate looks every chunk up, reading the unindexed packs at most once.
func (s *Store) locate(cs []Chunk) []located {
	out := make([]located, len(cs))
	for pass := 0; pass < 2; pass++ {
		missing := false
		s.mu.Lock()
		for i, c := range cs {
			if out[i].ok {
				continue
			}
			h, err := parseHash(c.Hash)
			if err != nil {
				continue
			}
			out[i].h = h
			out[i].loc, out[i].ok = s.idx[h]
			missing = missing || !out[i].ok
		}
		s.mu.Unlock()
		if !missing || pass == 1 {
			break
		}
		s.rescan(context.Background())
	}
	return out
}

// fetch reads a group and returns each chunk's bytes or *ChunkError. When
// the ranged read fails (a pack repacked meanwhile, a short object), each
// chunk is looked up and read again on its own.
func (s *Store) fetch(g readGroup) ([][]byte, []error) {
	bs, errs := make([][]byte, len(g.items)), make([]error, len(g.items))
	var raw []byte
	var err error
	if g.pack != "" {
		raw, err = s.b.Get(context.Background(), packName(g.pack), g.from, g.to-g.from)
	}
	for i, it := range g.items {
		if !it.ok {
			errs[i] = &ChunkError{Hash: it.c.Hash, Offset: it.off, Err: errors.New("not in the repository")}
			continue
		}
		if err != nil {
			bs[i], errs[i] = s.readChunk(it.c, it.off)
			continue
		}
		lo := int64(it.loc.off) - g.from
		b, verr := verifyBlob(raw[lo:lo+int64(it.loc.n)], it.c, it.h)
		if verr != nil {
			errs[i] = &ChunkError{Hash: it.c.Hash, Offset: it.off, Err: verr}
			continue
		}
		bs[i] = b
	}
	return bs, errs
}

// stream reads the chunks of cs in order, several groups in flight, and
// calls emit for each chunk in order until it returns false or stop ends.
func (s *Store) stream(cs []Chunk, stop <-chan struct{}, emit func(i int, b []byte, err error) bool) {
	s.streamWithin(cs, stop, nil, emit)
}

// A readBudget bounds the bytes a stream holds ahead of its consumer: a
// group's ranged read and its decoded chunks are charged before the read
// starts; the read's bytes are given back when it is decoded, each chunk's
// when the consumer is done with it (release). A group is started when it
// fits, or when nothing is held (a group larger than the budget still
// makes progress, alone).
type readBudget struct {
	limit int64
	mu    sync.Mutex
	held  int64
	peak  int64         // tests
	freed chan struct{} // a release since the planner last looked (capacity 1)
	wait  func()        // tests: called when the planner waits for room
}

func newReadBudget(limit int64) *readBudget {
	return &readBudget{limit: limit, freed: make(chan struct{}, 1)}
}

// acquire charges n bytes once they fit; false when stop or quit ends
// first. One goroutine (the planner) acquires.
func (b *readBudget) acquire(n int64, stop, quit <-chan struct{}) bool {
	for {
		b.mu.Lock()
		if b.held == 0 || b.held+n <= b.limit {
			b.held += n
			b.peak = max(b.peak, b.held)
			b.mu.Unlock()
			return true
		}
		b.mu.Unlock()
		if b.wait != nil {
			b.wait()
		}
		select {
		case <-b.freed:
		case <-stop:
			return false
		case <-quit:
			return false
		}
	}
}

// release gives n bytes back.
func (b *readBudget) release(n int64) {
	if b == nil || n == 0 {
		return
	}
	b.mu.Lock()
	b.held -= n
	b.mu.Unlock()
	select {
	case b.freed <- struct{}{}:
	default:
	}
}

// cost is what a group holds at most: its ranged read and its chunks.
func (g readGroup) cost() (raw, decoded int64) {
	for _, it := range g.items {
		decoded += it.c.Len
	}
	return g.to - g.from, decoded
}

// streamWithin is stream whose groups are charged to bud (nil: only the
// number of groups in flight is bounded). With a budget, emit's consumer
// releases each chunk's length when it is done with its bytes.
func (s *Store) streamWithin(cs []Chunk, stop <-chan struct{}, bud *readBudget, emit func(i int, b []byte, err error) bool) {
	type res struct {
		bs   [][]byte
		errs []error
	}
	ahead, limit := max(2, runtime.GOMAXPROCS(0))*2, int64(maxGroup)
	if bud != nil {
		limit = min(limit, bud.limit/4) // two or more groups in flight: reading overlaps decoding and the consumer
	}
	queue := make(chan chan res, ahead)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		defer close(queue)
		for _, g := range s.groups(cs, limit) {
			raw, decoded := g.cost()
			if bud != nil && !bud.acquire(raw+decoded, stop, quit) {
				return
			}
			ch := make(chan res, 1)
			select {
			case queue <- ch:
			case <-stop:
				return
			case <-quit:
				return
			}
			wg.Go(func() {
				bs, errs := s.fetch(g)
				bud.release(raw)
				ch <- res{bs, errs}
			})
		}
	})
	i := 0
	for ch := range queue {
		r := <-ch
		for j := range r.bs {
			if !emit(i, r.bs[j], r.errs[j]) {
				close(quit)
				for range queue { // the planner ends; the reads in flight end on their own
				}
				return
			}
			i++
		}
	}
}

// readAhead is how many bytes a Reader holds ahead of its consumer at
// most (read, being read, decoded, queued), apart from one group larger
// than it. A slow or stalled consumer (a download the client reads slowly
// or not at all) holds this much, whatever the backup's size.
const readAhead = 4 << 20

// Reader returns the tar stream of backup m. Every chunk is checked
// against its hash as it is read; a damaged one ends the stream with a
// *ChunkError. Blobs are read by coalesced ranged reads, decompressed and
// hashed ahead, on several cores, in order, only as far ahead of the
// caller's reads as readAhead bytes.
func (s *Store) Reader(m Manifest) io.ReadCloser {
	return s.readerWithin(m, newReadBudget(readAhead))
}

// ReaderAhead is Reader with ahead bytes of read-ahead instead of
// readAhead (at least that): for a consumer that never stalls, such as a
// transfer's restore from a bucket, larger ranged reads with more of them
// in flight. The memory held stays bounded by ahead.
func (s *Store) ReaderAhead(m Manifest, ahead int64) io.ReadCloser {
	return s.readerWithin(m, newReadBudget(max(ahead, readAhead)))
}

func (s *Store) readerWithin(m Manifest, bud *readBudget) *reader {
	r := &reader{data: make(chan []byte, 16), stop: make(chan struct{}), bud: bud}
	// A shared repository: the node's lease while the stream is read.
	unlease, err := s.acquireLease(context.Background())
	if err != nil {
		r.fail = err
		close(r.data)
		r.unlease = func() {}
		return r
	}
	r.unlease = unlease
	r.wg.Go(func() {
		defer close(r.data)
		s.streamWithin(m.Chunks, r.stop, bud, func(i int, b []byte, err error) bool {
			if err != nil {
				r.errMu.Lock()
				r.fail = err
				r.errMu.Unlock()
				return false
			}
			if len(b) != int(m.Chunks[i].Len) {
				// Charged by the manifest's length: give back the rest.
				bud.release(m.Chunks[i].Len - int64(len(b)))
			}
			select {
			case r.data <- b:
				return true
			case <-r.stop:
				return false
			}
		})
	})
	return r
}

type reader struct {
	data  chan []byte
	stop  chan struct{}
	bud   *readBudget
	once  sync.Once
	wg    sync.WaitGroup
	errMu sync.Mutex
	fail  error
	buf   []byte
	chunk int64 // length of the chunk buf is the rest of
	err   error
	// unlease releases the node's lease on a shared repository.
	unlease func()
}

func (r *reader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		b, ok := <-r.data
		if !ok {
			r.errMu.Lock()
			r.err = r.fail
			r.errMu.Unlock()
			if r.err == nil {
				r.err = io.EOF
			}
			return 0, r.err
		}
		r.buf, r.chunk = b, int64(len(b))
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	if len(r.buf) == 0 {
		r.buf = nil
		r.bud.release(r.chunk)
	}
	return n, nil
}

// Close stops the reading ahead and waits for it.
func (r *reader) Close() error {
	r.once.Do(func() {
		close(r.stop)
		r.wg.Wait()
		r.unlease()
	})
	r.wg.Wait()
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
	s.stream(m.Chunks, nil, func(_ int, _ []byte, err error) bool {
		var ce *ChunkError
		if errors.As(err, &ce) {
			d.Chunks = append(d.Chunks, ce)
		}
		return true
	})
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
	badIdx := map[int]bool{}
	var off int64
	for i, c := range m.Chunks {
		for _, b := range bad {
			if b.Offset == off {
				spans = append(spans, span{off, off + c.Len})
				badSet[off] = true
				badIdx[i] = true
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
	// The manifest's file index names a file even when its tar header is
	// in the damaged chunk; the parse below adds the entries it does not
	// index (directories, links, small files of older manifests).
	for _, f := range m.Files {
		for i := f.First; i < f.First+f.Count; i++ {
			if badIdx[i] && !seen[f.Path] {
				seen[f.Path] = true
				names = append(names, f.Path)
				break
			}
		}
	}
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
