package chunkstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Commit stores the index of the backup's packs, then its manifest. The
// manifest is made (and checked) while the last pack and the index are
// stored: a small backup's commit is mostly those two Puts. Over a Stager
// the last pack, the index and the manifest are synced at once and made
// visible in that order (commitStaged).
func (w *Writer) Commit() (Manifest, error) { return w.commit(context.Background()) }

// commit is Commit, its stores under ctx.
func (w *Writer) commit(ctx context.Context) (Manifest, error) {
	committed := false
	defer func() { w.release(committed) }()
	if err := w.Cut(); err != nil {
		return Manifest{}, err
	}
	w.drain()
	var (
		m, cm         Manifest
		ids           []blobID
		b             []byte
		perr          error
		ready, cloned sync.WaitGroup
	)
	if w.failed() == nil {
		ready.Go(func() { m, ids, b, perr = w.prepare() })
	}
	manifest := func() (string, []byte, error) {
		ready.Wait()
		if perr == nil {
			perr = w.s.leaseValid()
		}
		// The caller gets m: the cache keeps its own slices, copied
		// while the manifest is stored.
		cloned.Go(func() {
			cm = m
			cm.Chunks, cm.Files = slices.Clone(m.Chunks), slices.Clone(m.Files)
		})
		return manifestName(m.Server, m.Backup), b, perr
	}
	var err error
	if st, ok := w.s.b.(Stager); ok {
		err = w.commitStaged(ctx, st, manifest)
	} else {
		err = w.commitPuts(ctx, manifest)
	}
	ready.Wait()
	cloned.Wait()
	if err != nil {
		return Manifest{}, err
	}
	s := w.s
	s.mu.Lock()
	s.latest.put(&latestEntry{server: m.Server, m: cm, ids: ids, size: len(b)})
	if s.gcActive {
		for h := range w.pinned {
			s.gcKeep[h] = struct{}{}
		}
		for _, k := range w.listPins {
			for _, h := range s.listPins[k] {
				s.gcKeep[h] = struct{}{}
			}
		}
	}
	s.mu.Unlock()
	committed = true
	return m, nil
}

// commitPuts stores the last pack, then the index, then the manifest,
// each Put durable before the next.
func (w *Writer) commitPuts(ctx context.Context, manifest func() (string, []byte, error)) error {
	err := w.stop()
	if err == nil {
		err = w.storeIndex(ctx)
	}
	name, b, merr := manifest()
	if err == nil {
		err = merr
	}
	if err != nil {
		return err
	}
	return w.s.b.Put(ctx, name, b)
}

// commitStaged stages the last pack, the index and the manifest at once,
// then publishes them in that order: no object is visible before those it
// names are durable, as with commitPuts, but their writes and syncs
// overlap.
func (w *Writer) commitStaged(ctx context.Context, st Stager, manifest func() (string, []byte, error)) error {
	last, hasLast := w.app.finishPack()
	if err := w.stop(); err != nil {
		if hasLast {
			w.packs = append(w.packs, last.p) // Abort ends its flight
		}
		return err
	}
	type object struct {
		name   string
		data   []byte
		staged Staged
		err    error
	}
	var objs []*object
	if hasLast {
		w.packs = append(w.packs, last.p)
		objs = append(objs, &object{name: packName(last.p.ID), data: last.data})
	}
	index := ""
	if len(w.packs) > 0 {
		index = "index/" + newID()
		objs = append(objs, &object{name: index, data: encodeIndex(w.packs)})
	}
	var staging sync.WaitGroup
	for _, o := range objs {
		staging.Go(func() { o.staged, o.err = st.Stage(ctx, o.name, o.data) })
	}
	mo := &object{}
	mo.name, mo.data, mo.err = manifest()
	if mo.err == nil {
		mo.staged, mo.err = st.Stage(ctx, mo.name, mo.data)
	}
	staging.Wait()
	objs = append(objs, mo)
	var err error
	for _, o := range objs {
		switch {
		case err == nil && o.err != nil:
			err = o.err
		case err == nil:
			err = o.staged.Publish()
			if err == nil && o.name == index {
				w.indexed(index)
			}
		case o.staged != nil:
			o.staged.Discard()
		}
	}
	return err
}

// fileIndex turns the files' segment ranges into chunk ranges, the
// manifest m's file index.
func (w *Writer) fileIndex(m *Manifest) error {
	starts := append(w.app.res.segStarts, len(m.Chunks))
	for i := range w.files {
		f := &w.files[i]
		if f.First < 0 || f.Count < 0 || f.First+f.Count >= len(starts) {
			return fmt.Errorf("file %s: segments %d+%d of %d", f.Path, f.First, f.Count, len(starts)-1)
		}
		f.First, f.Count = starts[f.First], starts[f.First+f.Count]-starts[f.First]
	}
	m.Files, w.files = w.files, nil
	return nil
}

// prepare makes the manifest of a drained backup: its file index, size
// and checksum, its chunks' hashes decoded and checked, its encoding.
func (w *Writer) prepare() (Manifest, []blobID, []byte, error) {
	r := &w.app.res
	m := w.head
	m.Chunks = r.chunks
	if err := w.fileIndex(&m); err != nil {
		return Manifest{}, nil, nil, err
	}
	m.Size = 0
	for _, c := range m.Chunks {
		m.Size += c.Len
	}
	// The check, the checksum and the encoding each take milliseconds for
	// a server of many files: they run at once. The manifest is encoded
	// with a placeholder for its checksum (always 40 hex digits), written
	// over it once known.
	var (
		ids     []blobID
		ierr    error
		sum     string
		checked sync.WaitGroup
	)
	mc, known := m, r.ids
	if r.idsLost {
		known = nil
	}
	skip := r.checked
	checked.Go(func() { ids, ierr = w.s.checkIndexed(mc, known, skip, w.app.mine) })
	checked.Go(func() { sum = ChunkListSHA1(mc.Chunks) })
	m.SHA1 = sha1Placeholder
	b, err := encodeManifestBin(&m, known)
	checked.Wait()
	if ierr != nil {
		return Manifest{}, nil, nil, ierr
	}
	m.SHA1 = sum
	if err == nil {
		copy(b[manifestSHA1At:], sum) // a SHA-1 is always 40 hex digits
	}
	return m, ids, b, err
}

// sha1Placeholder stands for a manifest's checksum while it is encoded.
var sha1Placeholder = strings.Repeat("0", 40)

// storeIndex stores the index object of the backup's packs and adds them
// to the in-memory index (they stay pinned by the writer).
func (w *Writer) storeIndex(ctx context.Context) error {
	if len(w.packs) == 0 {
		return nil
	}
	name := "index/" + newID()
	if err := w.s.b.Put(ctx, name, encodeIndex(w.packs)); err != nil {
		return fmt.Errorf("storing the index: %w", err)
	}
	w.indexed(name)
	return nil
}

// indexed adds the backup's packs, stored in the index object name, to
// the in-memory index (they stay pinned by the writer).
func (w *Writer) indexed(name string) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.indexes[name] = struct{}{}
	for _, p := range w.packs {
		w.s.addPackLocked(p.ID, p.Entries)
	}
}

// checkIndexed refuses to write a manifest naming a blob the repository
// has no index entry for (a lost index: the unindexed packs are read) and
// that is not one of the backup's own (mine: in its packs, which Commit
// indexes before it writes the manifest). It returns the chunks' hashes,
// decoded: known when the caller has them (then m's are not read). The
// chunks in the ranges skip (ascending) are not looked up: they are the
// writer's reused from a backup this Store committed (PrevFile.checked).
func (s *Store) checkIndexed(m Manifest, known []blobID, skip [][2]int, mine map[blobID]struct{}) ([]blobID, error) {
	ids := known
	if len(ids) != len(m.Chunks) {
		ids = make([]blobID, len(m.Chunks))
		for i, c := range m.Chunks {
			h, err := parseHash(c.Hash)
			if err != nil {
				return nil, err
			}
			ids[i] = h
		}
	}
	var missing []int
	s.mu.Lock()
	for i, h := range ids {
		for len(skip) > 0 && i >= skip[0][1] {
			skip = skip[1:]
		}
		if len(skip) > 0 && i >= skip[0][0] {
			continue
		}
		if _, ok := s.idx[h]; !ok {
			if _, ok := mine[h]; !ok {
				missing = append(missing, i)
			}
		}
	}
	s.mu.Unlock()
	for _, i := range missing { // lookup reads the unindexed packs once
		if _, ok := s.lookup(ids[i]); !ok {
			return nil, fmt.Errorf("chunk %s of the backup is not in the repository", m.Chunks[i].Hash[:16])
		}
	}
	return ids, nil
}
