package chunkstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
)

// The writer's stages (issue 38 §4). The caller's goroutine (the walk
// reading files, writer.go) hands the segments, in batches of about a
// MiB, to the chunker; GOMAXPROCS hashers hash and compress the chunks,
// in groups of about a MiB; the appender takes the groups in stream
// order, makes the backup's chunk list, skips the chunks the repository
// or this backup has and appends the others to the backup's pack; two
// uploaders store the full packs while the next fills. Each stage owns its
// state, and channels join them:
//
//	caller --segs--> chunker --jobs--> hashers (close done)
//	                         --order-> appender --uploads--> uploaders
//
// The batches and groups make a tree of small files wake each goroutine
// once per MiB, not once per file (each wake-up costs microseconds; a
// server has tens of thousands of small files). The first error of any
// stage (or the end of the writer's context) is kept in the writers'
// firstError, which ends the uploads' context; from then on every stage
// only drains its input, so that none blocks, and the writer joins them.

// firstError is the first error of a writer's stages; setting it ends
// the context of the Puts in flight.
type firstError struct {
	mu     sync.Mutex
	err    error
	cancel context.CancelFunc
}

func (e *firstError) set(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		e.err = err
		e.cancel()
	}
}

func (e *firstError) get() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// pending is a chunk on its way from the chunker to the appender.
type pending struct {
	n     int
	data  []byte // returned to the pool by the hasher
	h     blobID
	blob  []byte // nil when the repository has it; returned by the appender
	raw   bool   // blob is the plain chunk, to be stored raw
	known bool
}

// segBatch is consecutive parts of the stream: data holds their bytes,
// one part after the other.
type segBatch struct {
	data  []byte
	parts []segPart
}

// segPart is the bytes of a segment from the previous part's end to end
// (the segment's last ones when final), or the reused chunks of a whole
// segment (then it has no bytes), or the room the backup's lists will
// need (then it is no segment).
type segPart struct {
	end      int
	final    bool
	reuse    []Chunk
	reuseIDs []blobID // reuse's hashes decoded, when known
	checked  bool     // reuse is PrevFile.checked
	room     *room
}

// room is how many chunks and segments a backup will have, about
// (LatestIndex): the appender makes room for them at once rather than
// growing its lists one append at a time.
type room struct{ chunks, segs int }

// streamItem is what the appender takes, in stream order: a chunk, the
// start of a segment, a reused segment or a room hint.
type streamItem struct {
	p     *pending // a chunk, or nil
	start bool     // a segment starts here (before p)
	part  segPart  // a reused segment (part.reuse) or a hint (part.room)
}

// chunkGroup is items that travel together from the chunker through a
// hasher to the appender; done is closed when the hasher is through.
type chunkGroup struct {
	items []streamItem
	bytes int
	done  chan struct{}
}

// batchFlush and groupFlush are the sizes at which a batch of segments
// and a group of chunks are handed on; batchParts bounds the parts of a
// batch of reused files (they have no bytes).
const (
	batchFlush = 1 << 20
	groupFlush = 1 << 20
	batchParts = 1024
)

// chunker cuts the segments into chunks, in order, on its own goroutine
// (the caller's reads the files), and hands them to the hashers and the
// appender. After an error it only drains.
type chunker struct {
	s     *Store
	errs  *firstError
	jobs  chan<- *chunkGroup
	order chan<- *chunkGroup
	free  chan<- []segPart // batches' part lists it is through with

	carry []byte // what is left of the current segment
	inSeg bool
	group *chunkGroup // the items not yet handed on
}

func (c *chunker) run(segs <-chan segBatch) {
	defer close(c.order)
	defer close(c.jobs)
	for b := range segs {
		from := 0
		for _, p := range b.parts {
			if p.reuse != nil || p.room != nil {
				c.add(streamItem{start: p.reuse != nil, part: p}, 0)
				continue
			}
			c.segmentPart(b.data[from:p.end], p.final)
			from = p.end
		}
		c.handGroup()
		c.s.putBatchBuf(b.data)
		clear(b.parts) // the reused chunks are not held
		select {
		case c.free <- b.parts[:0]:
		default:
		}
	}
}

// segmentPart chunks the bytes of a part of a segment.
func (c *chunker) segmentPart(data []byte, final bool) {
	if !c.inSeg {
		c.add(streamItem{start: true}, 0)
		c.inSeg = true
	}
	buf := data
	if len(c.carry) > 0 {
		c.carry = append(c.carry, data...)
		buf = c.carry
	}
	var rest []byte
	if c.errs.get() == nil {
		rest = c.chunk(buf, final)
	}
	// The batch's buffer is reused: what is left is copied.
	c.carry = append(c.carry[:0:0], rest...)
	if final {
		c.inSeg, c.carry = false, nil
	}
}

// chunk cuts buf into chunks and adds them to the group; unless final,
// the last chunk's bytes are returned (more of the segment follows, and
// the chunker would cut it elsewhere).
func (c *chunker) chunk(buf []byte, final bool) []byte {
	off := 0
	for off < len(buf) {
		n := cutPoint(buf[off:])
		if !final && off+n == len(buf) {
			break
		}
		data := c.s.bufs.get(n)
		copy(data, buf[off:off+n])
		c.add(streamItem{p: &pending{n: n, data: data}}, n)
		if c.group.bytes >= groupFlush {
			c.handGroup()
		}
		off += n
	}
	return buf[off:]
}

// add appends it, of n bytes, to the group.
func (c *chunker) add(it streamItem, n int) {
	if c.group == nil {
		c.group = &chunkGroup{done: make(chan struct{})}
	}
	c.group.items = append(c.group.items, it)
	c.group.bytes += n
}

// handGroup hands the items gathered so far to a hasher and, in order,
// to the appender.
func (c *chunker) handGroup() {
	if c.group == nil {
		return
	}
	c.order <- c.group
	c.jobs <- c.group
	c.group = nil
}

// hashers hash and compress the chunks; they share nothing but the
// store's lock (the pins) and the set of chunks the writer may skip.
type hashers struct {
	s      *Store
	pinned map[blobID]struct{} // the writer's, guarded by s.mu
	own    *ownChunks
	load   func() []blobID // own's ids (Writer.ownIDs)
}

func (h *hashers) run(jobs <-chan *chunkGroup) {
	for g := range jobs {
		for _, it := range g.items {
			if it.p != nil {
				h.hashAndEncode(it.p)
			}
		}
		close(g.done)
	}
}

// hashAndEncode hashes a chunk and, unless the repository has it,
// compresses it.
func (h *hashers) hashAndEncode(p *pending) {
	s := h.s
	p.h = sha256.Sum256(p.data)
	// An indexed blob the writer may reuse is pinned and not compressed
	// again.
	p.known = h.own.mayReuse(p.h, h.load) && s.pinIfIndexed(p.h, h.pinned)
	if p.known {
		s.bufs.put(p.data)
		p.data = nil
		return
	}
	buf := s.bufs.get(blobBound(len(p.data)))
	if p.blob = compress(buf, p.data); p.blob != nil {
		s.bufs.put(p.data)
	} else {
		// Incompressible: the chunk goes to the pack as it is (no copy
		// into a blob first); the appender writes its kind byte and
		// returns it.
		s.bufs.put(buf)
		p.blob, p.raw = p.data, true
	}
	p.data = nil
}

// chunkList is the backup's chunks as the appender makes them.
type chunkList struct {
	chunks []Chunk
	// ids is the decoded hash of each chunk, unless idsLost (chunks
	// reused without theirs): the commit's check needs them, and
	// decoding 70,000 hex hashes took milliseconds.
	ids     []blobID
	idsLost bool
	// checked is the ranges [from, to) of chunks reused from a backup
	// this Store committed (PrevFile.checked): the commit's check skips
	// them.
	checked   [][2]int
	segStarts []int // where each segment starts in chunks
}

// appender takes the chunks in stream order: it makes the chunk list and
// appends the chunks the repository or this backup does not have to the
// pack. After an error it only drains, so the chunker never blocks. Once
// the stages are joined, its state is the writer's (Commit).
type appender struct {
	s       *Store
	errs    *firstError
	pinned  map[blobID]struct{} // the writer's, guarded by s.mu
	uploads chan<- packUpload

	res  chunkList
	pack packer
	mine map[blobID]struct{} // blobs in this backup's packs
}

func (a *appender) run(order <-chan *chunkGroup) {
	for g := range order {
		<-g.done
		for _, it := range g.items {
			a.take(it)
		}
	}
}

func (a *appender) take(it streamItem) {
	r := &a.res
	if it.start {
		r.segStarts = append(r.segStarts, len(r.chunks))
	}
	if p := it.part; p.room != nil {
		r.chunks, r.ids = slices.Grow(r.chunks, p.room.chunks), slices.Grow(r.ids, p.room.chunks)
		r.segStarts = slices.Grow(r.segStarts, p.room.segs)
	} else if p.reuse != nil {
		r.chunks = append(r.chunks, p.reuse...)
		r.ids = append(r.ids, p.reuseIDs...)
		r.idsLost = r.idsLost || len(p.reuseIDs) != len(p.reuse)
		if p.checked {
			r.checked = addRange(r.checked, len(r.chunks)-len(p.reuse), len(r.chunks))
		}
	}
	if p := it.p; p != nil {
		r.chunks = append(r.chunks, Chunk{Hash: hex.EncodeToString(p.h[:]), Len: int64(p.n)})
		r.ids = append(r.ids, p.h)
		a.appendChunk(p)
	}
}

// addRange adds [from, to) to the ascending ranges rs, joining it to the
// last one when they touch.
func addRange(rs [][2]int, from, to int) [][2]int {
	if n := len(rs); n > 0 && rs[n-1][1] == from {
		rs[n-1][1] = to
		return rs
	}
	return append(rs, [2]int{from, to})
}

// appendChunk adds a chunk to the pack unless the repository or this
// backup has it.
func (a *appender) appendChunk(p *pending) {
	s := a.s
	if _, ok := a.mine[p.h]; p.known || ok || a.errs.get() != nil {
		if p.blob != nil {
			s.bufs.put(p.blob)
		}
		return
	}
	s.mu.Lock()
	s.pinLocked(p.h, a.pinned)
	s.mu.Unlock()
	a.mine[p.h] = struct{}{}
	if p.raw {
		a.pack.addRaw(p.h, p.blob)
	} else {
		a.pack.add(p.h, p.blob, p.n)
	}
	s.bufs.put(p.blob)
	if a.pack.full() {
		a.flushPack()
	}
}

// flushPack hands the current pack to the uploaders. It is in flight (no
// GC removes it) from now until Commit or Abort.
func (a *appender) flushPack() {
	if u, ok := a.finishPack(); ok {
		a.uploads <- u
	}
}

// finishPack ends the current pack, if any, and puts it in flight.
func (a *appender) finishPack() (packUpload, bool) {
	if a.pack.empty() {
		return packUpload{}, false
	}
	id := newID()
	b, es := a.pack.finish()
	a.s.mu.Lock()
	a.s.inflight[id] = struct{}{}
	a.s.mu.Unlock()
	return packUpload{indexedPack{ID: id, Entries: es}, b}, true
}

type packUpload struct {
	p    indexedPack
	data []byte
}

// packUploaders is how many packs are stored at once: with one, the
// disk idled while a pack was written to the page cache and the chunking
// waited while it was synced.
const packUploaders = 2

// uploader stores the packs while the next ones are filled, so that a
// Put (an fsync, a request) does not stall the chunking. Once joined, its
// packs are the writer's.
type uploader struct {
	s     *Store
	errs  *firstError
	free  chan<- []byte // the packer's buffers to fill again
	packs []indexedPack // stored, not yet indexed
}

func (u *uploader) run(ctx context.Context, uploads <-chan packUpload) {
	for p := range uploads {
		stored := false
		if u.errs.get() == nil {
			if err := u.s.b.Put(ctx, packName(p.p.ID), p.data); err != nil {
				u.errs.set(fmt.Errorf("storing a pack: %w", err))
			} else {
				u.packs = append(u.packs, p.p)
				stored = true
			}
		}
		if !stored {
			// Not the backup's: no longer in flight (a GC removes what
			// a failed Put may have left).
			u.s.mu.Lock()
			delete(u.s.inflight, p.p.ID)
			u.s.mu.Unlock()
		}
		select {
		case u.free <- p.data:
		default:
		}
	}
}
