package chunkstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Stale transfer snapshots (issue 36, docs/backup-repository.md
// "Transfer snapshots of a transfer that is over"). A transfer by manifest
// stores the server as snapshots/<server>/transfer-<uuid>.json; the
// transfer deletes it when it ends, but a source killed before that left
// it (and its chunks) for ever. The rule: a transfer snapshot is kept only
// while a transfer that uses it runs. Every process that uses one (the
// source that writes it, the target that extracts it) holds it
// (HoldTransfer): a hold is known in the process and keeps this node's
// writer lease taken. A collection runs only when no other node holds a
// live lease, so a transfer snapshot the collecting process does not hold,
// seen by a collection, belongs to no running transfer of any node: the
// collector deletes its manifest (before it decides what is used, so its
// chunks go in the same collection).

// transferPrefix starts the name of every transfer snapshot.
const transferPrefix = "transfer-"

// IsTransferSnapshot reports whether name is a transfer snapshot's
// ("transfer-" and a UUID in its text form); a panel's backup id never is.
func IsTransferSnapshot(name string) bool {
	rest, ok := strings.CutPrefix(name, transferPrefix)
	if !ok || len(rest) != 36 {
		return false
	}
	for i, c := range rest {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
				return false
			}
		}
	}
	return true
}

// ErrTransferCollected is a transfer snapshot that a running collection
// of this process has found stale and is deleting.
var ErrTransferCollected = errors.New("the transfer snapshot is being collected: its transfer is over")

// TransferHold is a running transfer's hold on its snapshot: the
// collector of this process keeps the snapshot, and this node's writer
// lease is held (so no other node collects) until Release.
type TransferHold struct {
	s       *Store
	key     string
	gen     uint64
	unlease func()
	once    sync.Once
}

func transferKey(server, name string) string { return server + "/" + name }

// HoldTransfer holds the transfer snapshot name of server (written, being
// written, or read by this process). It is refused when a collection of
// this process has already found the snapshot stale.
func (s *Store) HoldTransfer(ctx context.Context, server, name string) (*TransferHold, error) {
	if !IsTransferSnapshot(name) {
		return nil, fmt.Errorf("%q is not a transfer snapshot's name", name)
	}
	key := transferKey(server, name)
	s.mu.Lock()
	if _, gone := s.condemned[key]; gone {
		s.mu.Unlock()
		return nil, ErrTransferCollected
	}
	s.held[key]++
	s.mu.Unlock()
	h := &TransferHold{s: s, key: key}
	unlease, err := s.acquireLease(ctx)
	if err != nil {
		h.unhold()
		return nil, err
	}
	h.unlease = unlease
	s.mu.Lock()
	h.gen = s.leaseGenLocked()
	s.mu.Unlock()
	return h, nil
}

// Valid is nil while the hold's lease has been surely live for every
// other node without a break since the hold was taken: no other node can
// have collected the snapshot. Else ErrLeaseLost: a transfer must fail
// rather than name the snapshot to its target.
func (h *TransferHold) Valid() error {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shared == nil || s.readOnly {
		return nil
	}
	l := s.shared.leases
	if l.gen != h.gen || time.Now().After(l.until) {
		return ErrLeaseLost
	}
	return nil
}

// Release ends the hold (once; later calls do nothing).
func (h *TransferHold) Release() {
	h.once.Do(func() {
		h.unlease()
		h.unhold()
	})
}

func (h *TransferHold) unhold() {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if h.s.held[h.key]--; h.s.held[h.key] <= 0 {
		delete(h.s.held, h.key)
	}
}

// leaseGenLocked is this node's writer lease generation (0 when not
// shared): it changes when the lease is taken again or was renewed after
// a moment it was not surely live.
func (s *Store) leaseGenLocked() uint64 {
	if s.shared == nil {
		return 0
	}
	return s.shared.leases.gen
}

// dropStaleTransfers deletes the manifests of the transfer snapshots no
// transfer of this process holds (the collector holds its lease, so no
// other node runs one). They are condemned first, under the lock, so a
// hold taken meanwhile is refused rather than left reading a snapshot
// whose chunks go. It returns the snapshots deleted.
func (s *Store) dropStaleTransfers(ctx context.Context, lease *leaseHolder) ([]string, error) {
	objs, err := s.b.List(ctx, "snapshots/")
	if err != nil {
		return nil, fmt.Errorf("reading the manifests: %w", err)
	}
	var stale []string
	s.mu.Lock()
	for _, o := range objs {
		srv, name, ok := manifestObject(o.Name)
		if !ok || !IsTransferSnapshot(name) {
			continue
		}
		key := transferKey(srv, name)
		if s.held[key] > 0 {
			continue
		}
		s.condemned[key] = struct{}{}
		stale = append(stale, key)
	}
	s.mu.Unlock()
	// A collector that could not renew its lease stops before any delete.
	if len(stale) > 0 {
		if err := s.gcLeaseValid(lease); err != nil {
			return nil, err
		}
	}
	for i, key := range stale {
		srv, name, _ := strings.Cut(key, "/")
		if err := s.deleteManifest(srv, name); err != nil && !errors.Is(err, ErrNotFound) {
			return stale[:i], err
		}
	}
	return stale, nil
}

// uncondemn forgets the snapshots a collection condemned (at its end).
func (s *Store) uncondemn() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.condemned)
}
