package chunkstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"sync"
)

// Policy is what the operator chooses of the repository's trade-offs
// (system.backups.repository.dedup_scope and max_unused_percent).
type Policy struct {
	// NodeWideDedup lets a backup skip a chunk any backup of the
	// repository stored. Off (the default), a backup skips only the chunks
	// of its server's latest backup and its own: a chunk only another
	// server's backups hold is stored again, so that the time and the
	// bytes of a backup never tell its owner what another server holds
	// (docs/security.md, issue 33 item 8).
	NodeWideDedup bool
	// MaxUnusedPercent is the share of the packs' bytes a GC leaves
	// unused: it repacks the packs with the most unused bytes first until
	// the unused bytes are at most this share of the packs' bytes
	// (restic's --max-unused). 0 repacks every pack with an unused byte.
	MaxUnusedPercent int
}

// DefaultPolicy is per-server deduplication and 5 % unused at most.
func DefaultPolicy() Policy { return Policy{MaxUnusedPercent: 5} }

// SetPolicy applies p to the backups started and the GCs run from now on.
func (s *Store) SetPolicy(p Policy) {
	s.mu.Lock()
	s.policy = p
	s.mu.Unlock()
}

func (s *Store) currentPolicy() Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy
}

// ownChunks is, for a writer whose deduplication is per server, the
// chunks it may skip besides its own: its server's latest backup's,
// sorted. It is made at the first chunk the writer hashes, whatever that
// chunk is, so that even its cost tells nothing of other servers.
type ownChunks struct {
	once   sync.Once
	all    bool     // node-wide deduplication: every indexed chunk
	sorted []blobID // else these (the server's latest backup's)
}

// mayReuse reports whether w may skip h when the repository has it.
func (w *Writer) mayReuse(h blobID) bool {
	w.own.once.Do(w.loadOwn)
	if w.own.all {
		return true
	}
	_, ok := slices.BinarySearchFunc(w.own.sorted, h, compareIDs)
	return ok
}

// loadOwn makes w.own: the lists LatestIndex pinned when it ran, else the
// server's latest manifest.
func (w *Writer) loadOwn() {
	if w.own.all {
		return
	}
	s := w.s
	var ids []blobID
	s.mu.Lock()
	for _, k := range w.listPins {
		ids = append(ids, s.listPins[k]...)
	}
	s.mu.Unlock()
	if ids == nil {
		ids = s.latestIDs(w.m.Server)
	}
	slices.SortFunc(ids, compareIDs)
	w.own.sorted = slices.Compact(ids)
}

// compareIDs orders blob ids, their first 8 bytes compared as a number
// (a sort of 70,000 ids with bytes.Compare alone took twice as long).
func compareIDs(a, b blobID) int {
	x, y := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8])
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return bytes.Compare(a[8:], b[8:])
}

// latestIDs is the chunks of the newest manifest of server (a copy), nil
// when it has none.
func (s *Store) latestIDs(server string) []blobID {
	objs, _ := s.b.List(context.Background(), "snapshots/"+server+"/")
	slices.SortFunc(objs, func(a, b ObjectInfo) int { return b.ModTime.Compare(a.ModTime) })
	for _, o := range objs {
		srv, b, ok := manifestObject(o.Name)
		if !ok || srv != server {
			continue
		}
		s.mu.Lock()
		e := s.latest.get(srv, b, o.Size)
		var ids []blobID
		if e != nil {
			ids = slices.Clone(e.ids)
		}
		s.mu.Unlock()
		if e != nil {
			return ids
		}
		m, err := s.Manifest(srv, b)
		if err != nil {
			continue
		}
		ids = make([]blobID, 0, len(m.Chunks))
		for _, c := range m.Chunks {
			if h, err := parseHash(c.Hash); err == nil {
				ids = append(ids, h)
			}
		}
		return ids
	}
	return nil
}
