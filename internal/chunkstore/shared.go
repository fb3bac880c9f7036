package chunkstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"
)

// A repository shared by several nodes (system.backups.repository.shared,
// docs/backup-repository.md "Shared repository across nodes", issue 36).
//
// Objects added:
//
//	ids/<32 hex>             the repository's identity: the lowest name is its id
//	nodes/<node>             each node's claim, {"shared": true}
//	locks/writers/<node>     a node's writer lease (backups, restores, reads)
//	locks/gc/<node>          a node's collector lease
//
// A lease is a small JSON object with its node and its expiry in the
// writer's clock; it is renewed every leaseTTL/4 while held and deleted
// when released. Another node takes it for live until expiry+skewBound by
// its own clock, so clocks may differ by up to skewBound. A crashed node's
// lease is ignored from then on.
//
// The rule between writers and the collector is the order of their Puts:
// a writer stores its lease, then lists the collector leases and waits
// while another node's is live; a collector stores its lease, then lists
// the writer leases and gives up (ErrGCDeferred) when another node's is
// live, or when another node's collector lease is. Each stores before it
// looks, so at least one of the two sees the other (strong consistency,
// "Consistency assumptions"), and a collector never runs while another
// node writes or reads. A writer then brings its index up to date
// (syncIndex) before it decides what the repository holds.

const (
	idsPrefix     = "ids/"
	writersPrefix = "locks/writers/"
	gcPrefix      = "locks/gc/"

	// defaultLeaseTTL is how far ahead a lease's expiry is set.
	defaultLeaseTTL = 60 * time.Second
	// SkewBound is the clock difference between nodes tolerated: a lease
	// is live until its expiry plus this by the reader's clock.
	SkewBound = 30 * time.Second
)

// ErrGCDeferred is a collection not run because another node holds a
// lease (a backup, a restore or a collection runs there).
var ErrGCDeferred = errors.New("garbage collection deferred: another node holds a lease on the shared repository")

// ErrLeaseLost is a lease that could not be renewed in time: another
// node's collector may have taken it for expired.
var ErrLeaseLost = errors.New("the lease on the shared repository could not be renewed in time")

type leaseBody struct {
	Node    string    `json:"node"`
	Expires time.Time `json:"expires"`
}

// shared is the state of a shared repository; nil fields mean not shared.
type sharedState struct {
	node   string        // this node's id
	ttl    time.Duration // lease expiry
	skew   time.Duration // tolerated clock difference
	poll   time.Duration // how often a writer looks again at a collector lease
	leases *leaseHolder
}

// SetShared makes s a repository shared with other nodes, this one node
// (its id in the configuration). Call it once, after opening.
func (s *Store) SetShared(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shared = &sharedState{node: node, ttl: defaultLeaseTTL, skew: SkewBound, poll: time.Second}
	s.shared.leases = &leaseHolder{s: s, name: leaseName(writersPrefix, node), mu: leaseMutex{make(chan struct{}, 1)}}
}

func (s *Store) sharedMode() *sharedState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shared
}

// leaseName is node's lease object under prefix.
func leaseName(prefix, node string) string {
	return prefix + strings.TrimPrefix(NodeObject(node), nodesPrefix)
}

func (sh *sharedState) body(now time.Time) []byte {
	b, _ := json.Marshal(leaseBody{Node: sh.node, Expires: now.Add(sh.ttl).UTC()})
	return b
}

// liveOthers lists the leases under prefix of other nodes that are live
// (their expiry plus the skew bound not past). A lease that cannot be
// read or parsed is taken for live until its object is older than the
// expiry and the skew bound (it may be being written).
func (s *Store) liveOthers(ctx context.Context, prefix string) ([]string, error) {
	sh := s.sharedMode()
	mine := leaseName(prefix, sh.node)
	objs, err := s.b.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []string
	for _, o := range objs {
		if o.Name == mine {
			continue
		}
		raw, err := s.b.Get(ctx, o.Name, 0, -1)
		if errors.Is(err, fs.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, err
		}
		var l leaseBody
		if json.Unmarshal(raw, &l) != nil || l.Expires.IsZero() {
			if now.Sub(o.ModTime) < sh.ttl+sh.skew {
				out = append(out, o.Name)
			}
			continue
		}
		if now.Before(l.Expires.Add(sh.skew)) {
			out = append(out, o.Name)
		}
	}
	return out, nil
}

// syncIndex brings the in-memory index up to the repository's index
// objects: those it has not read are read and added; when one it read is
// gone (another node's collector replaced it) the index is read again
// whole.
func (s *Store) syncIndex(ctx context.Context) error {
	objs, err := s.b.List(ctx, "index/")
	if err != nil {
		return err
	}
	listed := make(map[string]struct{}, len(objs))
	for _, o := range objs {
		listed[o.Name] = struct{}{}
	}
	s.mu.Lock()
	gone := false
	for n := range s.indexes {
		if _, ok := listed[n]; !ok {
			gone = true
			break
		}
	}
	var fresh []string
	for _, o := range objs {
		if _, ok := s.indexes[o.Name]; !ok {
			fresh = append(fresh, o.Name)
		}
	}
	s.mu.Unlock()
	if gone {
		return s.reload(ctx)
	}
	for _, n := range fresh {
		b, err := s.b.Get(ctx, n, 0, -1)
		if errors.Is(err, fs.ErrNotExist) {
			return s.reload(ctx) // replaced by a collection meanwhile
		}
		if err != nil {
			return err
		}
		packs, perr := parseIndex(b)
		s.mu.Lock()
		s.indexes[n] = struct{}{}
		if perr == nil {
			for _, p := range packs {
				s.addPackLocked(p.ID, p.Entries)
			}
		}
		s.mu.Unlock()
	}
	return nil
}

// RepositoryID is the identity of the repository: the lowest name under
// ids/. When there is none and create, this node stores one and reads the
// lowest again (two nodes creating at once both end up naming the lowest
// of the two once both Puts returned; a transfer between nodes that
// disagree in that instant falls back to a full one).
func (s *Store) RepositoryID(ctx context.Context, create bool) (string, error) {
	return RepositoryIDBackend(ctx, s.b, create && !s.readOnly)
}

// RepositoryIDBackend is RepositoryID on the repository in b.
func RepositoryIDBackend(ctx context.Context, b Backend, create bool) (string, error) {
	lowest := func() (string, error) {
		objs, err := b.List(ctx, idsPrefix)
		if err != nil {
			return "", err
		}
		var ids []string
		for _, o := range objs {
			id := strings.TrimPrefix(o.Name, idsPrefix)
			if isHexID(id) {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			return "", nil
		}
		return slices.Min(ids), nil
	}
	id, err := lowest()
	if err != nil || id != "" || !create {
		return id, err
	}
	if err := b.Put(ctx, idsPrefix+newID(), nil); err != nil {
		return "", fmt.Errorf("storing the repository's id: %w", err)
	}
	return lowest()
}

func isHexID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ClaimShared is ClaimSharedBackend on the open repository.
func (s *Store) ClaimShared(ctx context.Context, node string) error {
	if s.readOnly {
		return nil
	}
	return ClaimSharedBackend(ctx, s.b, node)
}

// ClaimSharedBackend claims the repository in b for node as a shared one:
// it is refused (*SharedError) when another node claimed it without
// sharing (that node's collector would destroy this one's backups).
func ClaimSharedBackend(ctx context.Context, b Backend, node string) error {
	mine := NodeObject(node)
	if err := refuseExclusive(ctx, b, mine); err != nil {
		return withNode(err, node)
	}
	raw, err := b.Get(ctx, mine, 0, -1)
	var c nodeClaim
	if err == nil && json.Unmarshal(raw, &c) == nil && c.Shared {
		return nil
	}
	host, _ := os.Hostname()
	claim, _ := json.Marshal(nodeClaim{Node: node, Hostname: host, Claimed: time.Now().UTC(), Shared: true})
	if err := b.Put(ctx, mine, claim); err != nil {
		return fmt.Errorf("claiming the repository for this node: %w", err)
	}
	// An exclusive node claiming at the same moment: one of the two sees
	// the other's claim (each stores before it looks) and withdraws.
	if err := refuseExclusive(ctx, b, mine); err != nil {
		_ = b.Delete(ctx, mine)
		return withNode(err, node)
	}
	return nil
}

func withNode(err error, node string) error {
	var se *SharedError
	if errors.As(err, &se) {
		se.Node = node
	}
	return err
}

// refuseExclusive is a *SharedError when a claim other than mine is not
// shared.
func refuseExclusive(ctx context.Context, b Backend, mine string) error {
	objs, err := b.List(ctx, nodesPrefix)
	if err != nil {
		return fmt.Errorf("reading the repository's node claims: %w", err)
	}
	var exclusive []string
	for _, o := range objs {
		if o.Name == mine {
			continue
		}
		raw, err := b.Get(ctx, o.Name, 0, -1)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading the repository's node claims: %w", err)
		}
		var c nodeClaim
		if json.Unmarshal(raw, &c) != nil || !c.Shared {
			exclusive = append(exclusive, o.Name)
		}
	}
	if len(exclusive) > 0 {
		return &SharedError{Others: exclusive, Exclusive: true}
	}
	return nil
}

// leaseHolder is this node's writer lease: held while any backup, restore
// or read of the repository runs in the process (a count), renewed by one
// goroutine, which release joins when the count drops to zero.
type leaseHolder struct {
	s     *Store
	name  string
	count int
	until time.Time // the lease is surely live by every clock until then
	// gen changes when the lease is taken, and when a renewal succeeds
	// after a moment the lease was not surely live (until had passed):
	// another node may have collected meanwhile (TransferHold.Valid).
	gen  uint64
	stop chan struct{}
	done chan struct{}
	// mu is taken for the whole acquisition (its Puts and waits), so
	// s.mu is never held over a request.
	mu leaseMutex
}

// leaseMutex is a channel mutex: acquire gives up when ctx ends.
type leaseMutex struct{ ch chan struct{} }

func (m *leaseMutex) lock(ctx context.Context) error {
	select {
	case m.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *leaseMutex) unlock() { <-m.ch }

// acquireLease holds this node's writer lease until the returned release
// is called (nothing to do when the repository is not shared). The first
// holder of the process stores the lease, waits while another node's
// collector lease is live, and brings the index up to date.
func (s *Store) acquireLease(ctx context.Context) (func(), error) {
	sh := s.sharedMode()
	if sh == nil || s.readOnly {
		return func() {}, nil
	}
	l := sh.leases
	if err := l.mu.lock(ctx); err != nil {
		return nil, err
	}
	defer l.mu.unlock()
	if l.count == 0 {
		if err := l.take(ctx, sh); err != nil {
			return nil, err
		}
	}
	l.count++
	once := false
	return func() {
		if once {
			return
		}
		once = true
		_ = l.mu.lock(context.Background())
		defer l.mu.unlock()
		if l.count--; l.count == 0 {
			l.drop()
		}
	}, nil
}

// take stores the lease, waits for other nodes' collections, syncs the
// index and starts the renewal.
func (l *leaseHolder) take(ctx context.Context, sh *sharedState) error {
	s := l.s
	now := time.Now()
	if err := s.putLease(ctx, l.name, sh.body(now)); err != nil {
		return fmt.Errorf("storing this node's lease on the shared repository: %w", err)
	}
	for {
		gcs, err := s.liveOthers(ctx, gcPrefix)
		if err == nil && len(gcs) == 0 {
			break
		}
		if err == nil && time.Since(now) > sh.ttl/2 {
			// Renew while waiting for a long collection.
			now = time.Now()
			err = s.b.Put(ctx, l.name, sh.body(now))
		}
		if err != nil {
			_ = s.b.Delete(context.Background(), l.name)
			return fmt.Errorf("reading the shared repository's leases: %w", err)
		}
		t := time.NewTimer(sh.poll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			_ = s.b.Delete(context.Background(), l.name)
			return ctx.Err()
		}
	}
	if err := s.syncIndex(ctx); err != nil {
		_ = s.b.Delete(context.Background(), l.name)
		return fmt.Errorf("reading the shared repository's index: %w", err)
	}
	s.mu.Lock()
	l.until = now.Add(sh.ttl - sh.skew)
	l.gen++
	s.mu.Unlock()
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go l.renew(sh, l.stop, l.done)
	return nil
}

// leasePutTries is how many times a lease is stored before its taking
// fails: S3-compatible servers have transient failures no SDK retries
// (versitygw's posix backend answers 409 ExistingObjectIsDirectory to a Put
// whose key's directory a Delete of its neighbour removed meanwhile: seen
// when a transfer's target took its lease as the source dropped its own).
// It is here, not in the S3 backend's retryer, on purpose: that retryer
// treats a 4xx as final for every object, and only a lease's failure ends
// a whole backup, restore or collection at once.
const leasePutTries = 3

// putLease stores a lease object, trying again after a short pause.
func (s *Store) putLease(ctx context.Context, name string, body []byte) error {
	var err error
	for i := range leasePutTries {
		if i > 0 {
			t := time.NewTimer(time.Duration(i) * 100 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return err
			}
		}
		if err = s.b.Put(ctx, name, body); err == nil {
			return nil
		}
	}
	return err
}

// renew stores the lease again every ttl/4 until stop.
func (l *leaseHolder) renew(sh *sharedState, stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(sh.ttl / 4)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), sh.ttl/4)
		now := time.Now()
		err := l.s.b.Put(ctx, l.name, sh.body(now))
		cancel()
		if err == nil {
			l.s.mu.Lock()
			if now.After(l.until) {
				l.gen++
			}
			l.until = now.Add(sh.ttl - sh.skew)
			l.s.mu.Unlock()
		}
	}
}

// drop stops the renewal and deletes the lease.
func (l *leaseHolder) drop() {
	close(l.stop)
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = l.s.b.Delete(ctx, l.name)
}

// leaseValid is nil while this node's lease is surely live for every
// other node (not shared: always), else ErrLeaseLost.
func (s *Store) leaseValid() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shared == nil || s.readOnly {
		return nil
	}
	if time.Now().After(s.shared.leases.until) {
		return ErrLeaseLost
	}
	return nil
}

// takeGCLease stores this node's collector lease and checks that no other
// node holds a lease (ErrGCDeferred when one does); then the index is
// brought up to date. The returned holder renews the lease until drop.
func (s *Store) takeGCLease(ctx context.Context) (*leaseHolder, error) {
	sh := s.sharedMode()
	if sh == nil {
		return nil, nil
	}
	l := &leaseHolder{s: s, name: leaseName(gcPrefix, sh.node)}
	now := time.Now()
	if err := s.putLease(ctx, l.name, sh.body(now)); err != nil {
		return nil, fmt.Errorf("storing this node's collector lease: %w", err)
	}
	fail := func(err error) (*leaseHolder, error) {
		_ = s.b.Delete(context.Background(), l.name)
		return nil, err
	}
	for _, prefix := range []string{gcPrefix, writersPrefix} {
		others, err := s.liveOthers(ctx, prefix)
		if err != nil {
			return fail(fmt.Errorf("reading the shared repository's leases: %w", err))
		}
		if len(others) > 0 {
			return fail(fmt.Errorf("%w (%s)", ErrGCDeferred, strings.Join(others, ", ")))
		}
	}
	if err := s.reload(ctx); err != nil {
		return fail(fmt.Errorf("reading the shared repository's index: %w", err))
	}
	s.mu.Lock()
	l.until = now.Add(sh.ttl - sh.skew)
	s.mu.Unlock()
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go l.renew(sh, l.stop, l.done)
	return l, nil
}

// gcLeaseValid is nil while the collector lease l (nil: not shared) is
// surely live for every node.
func (s *Store) gcLeaseValid(l *leaseHolder) error {
	if l == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Now().After(l.until) {
		return ErrLeaseLost
	}
	return nil
}

// SetLeaseTiming replaces the lease expiry and the clock skew bound of a
// shared repository (after SetShared): for the end-to-end tests'
// testing.repository_lease_ttl_ms, never for a production node.
func (s *Store) SetLeaseTiming(ttl, skew time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shared != nil {
		s.shared.ttl, s.shared.skew = ttl, skew
	}
}
