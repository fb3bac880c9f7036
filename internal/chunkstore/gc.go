package chunkstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// GC removes the blobs no manifest names: packs with no live blob are
// deleted, and the packs with the most unused bytes are repacked (their
// live blobs copied to new packs) until the unused bytes left are within
// Policy.MaxUnusedPercent. It is safe against backups being written at the same time in
// this process: a blob a backup uses is pinned under the lock that the GC
// decides under, blobs found dead are taken out of the index at that
// moment (a backup then stores them again), and the blobs of a backup
// finished during the GC are kept even when its manifest was written
// after the GC read the manifests.
//
// Against kill -9: new packs are stored before the index object naming
// them, which is stored before the index objects it replaces are deleted,
// which are deleted before the packs. Every moment leaves every index
// object naming only packs that exist. It returns the blobs removed.
func (s *Store) GC() (int, error) {
	if s.readOnly {
		return 0, errors.New("the repository is open read-only")
	}
	s.mu.Lock()
	// Pins of finished backups still being dropped would keep their
	// blobs for one more GC: wait for them (before the check below, which
	// must be made with s.mu held since).
	s.waitUnpinned()
	if s.gcActive {
		s.mu.Unlock()
		return 0, nil
	}
	s.gcActive, s.gcKeep = true, map[blobID]struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.gcActive, s.gcKeep = false, nil
		s.mu.Unlock()
	}()
	ctx := context.Background()
	lease, err := s.takeGCLease(ctx)
	if err != nil {
		return 0, err
	}
	if lease != nil {
		defer lease.drop()
	}
	defer s.uncondemn()
	// Transfer snapshots of transfers that are over go first (manifest
	// before packs, as for a deleted backup): their chunks are then unused.
	if _, err := s.dropStaleTransfers(ctx, lease); err != nil {
		return 0, err
	}
	used, err := s.usedBlobs()
	if err != nil {
		return 0, err
	}
	if s.afterMark != nil {
		s.afterMark()
	}
	orphans, adopted := s.adopt(ctx, used)
	plan := s.decide(used)
	plan.adopted += adopted
	moved := s.repack(ctx, plan)
	// A collector that could not renew its lease may be taken for
	// crashed by a node that then writes: it stops before any delete.
	if err := s.gcLeaseValid(lease); err != nil {
		return 0, err
	}
	if err := s.replaceIndexes(ctx, plan, moved); err != nil {
		return 0, err
	}
	if err := s.gcLeaseValid(lease); err != nil {
		return plan.removed, err
	}
	for _, id := range append(append(plan.dead, orphans...), moved.done...) {
		if err := s.b.Delete(ctx, packName(id)); err != nil {
			return plan.removed, err
		}
	}
	if err := s.sweepViewIndexes(ctx); err != nil {
		return plan.removed, err
	}
	return plan.removed, nil
}

func (s *Store) usedBlobs() (map[blobID]struct{}, error) {
	ms, err := s.List()
	if err != nil {
		return nil, fmt.Errorf("reading the manifests: %w", err)
	}
	used := map[blobID]struct{}{}
	for _, m := range ms {
		for _, c := range m.Chunks {
			if h, err := parseHash(c.Hash); err == nil {
				used[h] = struct{}{}
			}
		}
	}
	return used, nil
}

// adopt reads the packs no index names: those holding a used blob the
// index lacks (their index object was lost) are indexed again; the others
// (left by a crashed backup) are returned to be deleted.
func (s *Store) adopt(ctx context.Context, used map[blobID]struct{}) (orphans []string, adopted int) {
	for _, p := range s.unindexedPacks(ctx) {
		es, err := readPackIndex(ctx, s.b, packName(p.id), p.size)
		if err != nil {
			continue // a damaged pack is kept for a person to look at
		}
		s.mu.Lock()
		needed := false
		for _, e := range es {
			if _, u := used[e.Hash]; u {
				if _, in := s.idx[e.Hash]; !in {
					needed = true
				}
			}
		}
		if needed {
			s.addPackLocked(p.id, es)
			adopted++
		}
		s.mu.Unlock()
		if !needed {
			orphans = append(orphans, p.id)
		}
	}
	return orphans, adopted
}

type gcPlan struct {
	kept    []string               // packs kept as they are
	dead    []string               // packs with no live blob
	repack  map[string][]packEntry // packs mostly dead: their live blobs
	indexes []string               // index objects to replace
	removed int                    // blobs taken out of the index
	adopted int                    // packs indexed again
}

// decide sorts the indexed packs, under the lock, and takes the dead
// blobs of the packs it will delete out of the index: a pack with no live
// blob is deleted; of the others, those with the most unused bytes are
// repacked until the unused bytes left are within the policy's budget
// (unusedBudget).
func (s *Store) decide(used map[blobID]struct{}) gcPlan {
	s.mu.Lock()
	defer s.mu.Unlock()
	plan := gcPlan{repack: map[string][]packEntry{}}
	listed := s.pinnedByLists()
	live := func(id string, e packEntry) bool {
		if s.idx[e.Hash].pack != id {
			return false // a duplicate: the index has it elsewhere
		}
		_, u := used[e.Hash]
		_, k := s.gcKeep[e.Hash]
		_, l := listed[e.Hash]
		return u || k || l || s.pins[e.Hash] > 0
	}
	var uses []packUse
	var liveAll, unusedAll int64
	for id, es := range s.packs {
		u := packUse{id: id}
		for _, e := range es {
			u.total += int64(e.Len)
			if live(id, e) {
				u.live += int64(e.Len)
				u.lives = append(u.lives, e)
			}
		}
		if u.live == 0 {
			plan.dead = append(plan.dead, id)
			continue
		}
		liveAll += u.live
		unusedAll += u.total - u.live
		uses = append(uses, u)
	}
	toRepack := pickRepacks(uses, unusedAll, unusedBudget(liveAll, s.policy.MaxUnusedPercent))
	for _, u := range uses {
		if toRepack[u.id] {
			plan.repack[u.id] = u.lives
		} else {
			plan.kept = append(plan.kept, u.id)
		}
	}
	for _, id := range plan.dead {
		s.dropDeadLocked(id, live, &plan)
	}
	for id := range plan.repack {
		s.dropDeadLocked(id, live, &plan)
	}
	plan.adopted += len(s.rescued)
	plan.indexes = make([]string, 0, len(s.indexes))
	for n := range s.indexes {
		plan.indexes = append(plan.indexes, n)
	}
	return plan
}

// packUse is a pack's bytes: all its blobs', its live blobs' (and those).
type packUse struct {
	id          string
	live, total int64
	lives       []packEntry
}

// unusedBudget is the unused bytes allowed beside live bytes in use: pct
// % of what the packs would hold (restic's --max-unused: unused ≤ pct/(100-pct) × used).
func unusedBudget(live int64, pct int) int64 {
	if pct <= 0 {
		return 0
	}
	return live * int64(pct) / int64(100-pct)
}

// pickRepacks chooses the packs to repack: the most unused bytes first,
// until the unused bytes left (of unused in all) are within budget.
func pickRepacks(uses []packUse, unused, budget int64) map[string]bool {
	slices.SortFunc(uses, func(a, b packUse) int {
		return cmp.Or(cmp.Compare(b.total-b.live, a.total-a.live), strings.Compare(a.id, b.id))
	})
	out := map[string]bool{}
	for _, u := range uses {
		if unused <= budget || u.total == u.live {
			break
		}
		out[u.id] = true
		unused -= u.total - u.live
	}
	return out
}

// dropDeadLocked takes the blobs of pack id that are not live out of the
// index (the pack is deleted or repacked).
func (s *Store) dropDeadLocked(id string, live func(string, packEntry) bool, plan *gcPlan) {
	for _, e := range s.packs[id] {
		if s.idx[e.Hash].pack == id && !live(id, e) {
			delete(s.idx, e.Hash)
			plan.removed++
		}
	}
}

type repacked struct {
	done  []string      // old packs whose live blobs were copied
	stuck []string      // old packs kept (a read failed or a blob is damaged)
	packs []indexedPack // the new packs
}

// repack copies the live blobs of the packs to repack into new packs. A
// pack with a damaged live blob is kept as it is: its damage stays where
// verify and restores report it.
func (s *Store) repack(ctx context.Context, plan gcPlan) repacked {
	var out repacked
	var pk packer
	flush := func() bool {
		if pk.empty() {
			return true
		}
		id := newID()
		b, es := pk.finish()
		if err := s.b.Put(ctx, packName(id), b); err != nil {
			return false
		}
		out.packs = append(out.packs, indexedPack{ID: id, Entries: es})
		return true
	}
	for id, lives := range plan.repack {
		raw, err := s.b.Get(ctx, packName(id), 0, -1)
		if err != nil || !s.blobsWhole(raw, lives) {
			out.stuck = append(out.stuck, id)
			continue
		}
		for _, e := range lives {
			pk.add(e.Hash, raw[e.Off:e.Off+e.Len], int(e.Plain))
		}
		if pk.full() && !flush() {
			out.stuck = append(out.stuck, id)
			return out
		}
		out.done = append(out.done, id)
	}
	if !flush() {
		// The last new pack is lost: the packs it copied stay.
		out.stuck = append(out.stuck, out.done...)
		out.done = nil
	}
	return out
}

// blobsWhole checks the blobs es of a pack's bytes against their hashes.
func (s *Store) blobsWhole(raw []byte, es []packEntry) bool {
	for _, e := range es {
		if int64(e.Off)+int64(e.Len) > int64(len(raw)) {
			return false
		}
		if _, err := verifyBlob(raw[e.Off:e.Off+e.Len], Chunk{Len: int64(e.Plain)}, e.Hash); err != nil {
			return false
		}
	}
	return true
}

// replaceIndexes stores one index object naming every pack kept and new,
// switches the in-memory index to it, and deletes the index objects it
// replaces.
func (s *Store) replaceIndexes(ctx context.Context, plan gcPlan, moved repacked) error {
	if len(plan.dead) == 0 && len(plan.repack) == 0 && len(plan.indexes) <= 1 && plan.adopted == 0 {
		return nil
	}
	s.mu.Lock()
	var all []indexedPack
	for _, id := range append(plan.kept, moved.stuck...) {
		all = append(all, indexedPack{ID: id, Entries: s.packs[id]})
	}
	s.mu.Unlock()
	all = append(all, moved.packs...)
	name := "index/" + newID()
	if len(all) > 0 {
		if err := s.b.Put(ctx, name, encodeIndex(all)); err != nil {
			return err
		}
	}
	s.mu.Lock()
	for _, p := range moved.packs {
		s.packs[p.ID] = p.Entries
		for _, e := range p.Entries {
			s.idx[e.Hash] = blobLoc{pack: p.ID, off: e.Off, n: e.Len, pl: e.Plain}
		}
	}
	for _, id := range append(slicesClone(plan.dead), moved.done...) {
		delete(s.packs, id)
		delete(s.rescued, id)
	}
	for _, p := range all {
		delete(s.rescued, p.ID)
	}
	old := maps.Clone(s.indexes)
	for _, n := range plan.indexes {
		delete(s.indexes, n)
	}
	if len(all) > 0 {
		s.indexes[name] = struct{}{}
	}
	s.mu.Unlock()
	for _, n := range plan.indexes {
		if _, ok := old[n]; ok {
			if err := s.b.Delete(ctx, n); err != nil {
				return err
			}
		}
	}
	return nil
}

func slicesClone(a []string) []string { return append([]string(nil), a...) }
