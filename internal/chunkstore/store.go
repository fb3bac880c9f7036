// Package chunkstore is the deduplicating backup repository
// (system.backups.format: repository, docs/backup-repository.md).
//
// A backup is the same uncompressed tar stream the archive format would
// gzip, split into content-defined chunks (FastCDC, fastcdc.go). Each
// chunk is stored once, as a blob (S2-compressed or raw, blob.go) named by
// the SHA-256 of its plain bytes, appended to a pack of ~16 MiB (pack.go);
// a backup is a small manifest listing its chunks in order. Reading a
// backup back re-hashes every chunk, so a damaged blob is always seen.
//
// Objects, all through a Backend (a local directory or an S3 bucket):
//
//	config                            the repository's layout version
//	packs/<2 hex>/<32 hex>            a pack: blobs, their index, a trailer
//	index/<32 hex>                    an index object: packs and their blobs
//	snapshots/<server>/<backup>.json  a backup's manifest
//	snapshots/<server>/<backup>@<node>.json  a node's copy of one adopted from another (adopt.go)
//	views/<server>/<backup>[.dirs]    its view index, when written (view.go)
//	nodes/<node>                      a node's claim (nodes.go)
//	ids/<32 hex>                      the repository's id, when shared (shared.go)
//	locks/writers/<node>, locks/gc/<node>  leases of a shared repository
//
// Crash safety is the order of the Puts, each durable when it returns: a
// backup's packs, then the index object naming them, then its manifest. A
// GC writes its new packs and the index naming what it kept before it
// deletes the index objects it replaces, and those before the packs.
package chunkstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrNotFound is a backup with no manifest in the store.
var ErrNotFound = errors.New("backup not found in the repository")

// ErrOldLayout is a repository written by Wharf before packs.
var ErrOldLayout = errors.New("the backup repository has the old layout (one file per chunk under chunks/, before packs), which this Wharf does not read: " +
	"export its backups with the Wharf that wrote them (wharf backups export) and move the directory away (docs/backup-repository.md)")

// manifestVersion 4: the manifest is binary (manifestbin.go). Version 3
// was the same manifest in JSON: the checksum is ChunkListSHA1, the
// manifest has a file index, and its chunks are in packs. Version 2 was
// that in the one-file-per-chunk layout, version 1's checksum the tar
// stream's.
const manifestVersion = 4

// layoutConfig is the config object: the layout this code writes.
const layoutConfig = `{"layout":"packs","version":1}`

// blobLoc is where a blob is: pack (its id), offset and lengths.
type blobLoc struct {
	pack       string
	off, n, pl uint32
}

// Store is an open repository. Backups may run concurrently with each
// other and with GC in one process (see GC for why that is safe).
type Store struct {
	b        Backend
	dir      string // the local backend's directory, else ""
	readOnly bool

	mu       sync.Mutex
	idx      map[blobID]blobLoc     // every indexed blob
	packs    map[string][]packEntry // every indexed pack, with its blobs
	indexes  map[string]struct{}    // index objects idx was read from or written
	inflight map[string]struct{}    // packs of running backups, not yet indexed
	rescued  map[string]struct{}    // packs read from their trailers, in no index object
	pins     map[blobID]int         // blobs used by backups being written
	listPins map[int][]blobID       // chunk lists of earlier backups reused by backups being written
	lastPin  int                    // the key of the latest list pinned
	unpinned *sync.Cond             // on mu: a committed writer's pins were dropped
	unpins   int                    // committed writers' pins being dropped
	gcActive bool                   // a GC is running
	gcKeep   map[blobID]struct{}    // blobs of backups finished during a GC
	rescans  int                    // scans of unindexed packs (tests)
	bufs     bufPool                // chunk and blob buffers of the backups
	batches  sync.Pool              // *[]byte: the writers' batch buffers (batchBuf)
	latest   latestCache            // the manifests committed last, per server
	policy   Policy                 // guarded by mu (SetPolicy)

	shared *sharedState // a repository shared with other nodes (shared.go); guarded by mu

	held      map[string]int      // transfer snapshots running transfers hold (transfersnap.go), "<server>/<name>"
	condemned map[string]struct{} // transfer snapshots the running GC is deleting

	afterMark func()         // tests: runs between GC's reading of the manifests and its decision
	bg        sync.WaitGroup // the store's own goroutines (unpinLater), joined by Close
}

// Close waits for the goroutines the store started itself (a committed
// backup's pins being dropped). Its Readers and Writers are closed by their
// users before; the backend is the caller's.
func (s *Store) Close() { s.bg.Wait() }

// Open opens (creating when absent) the repository in the directory dir.
func Open(dir string) (*Store, error) {
	if _, err := os.Stat(filepath.Join(dir, "chunks")); err == nil {
		return nil, fmt.Errorf("%s: %w", dir, ErrOldLayout)
	}
	b, err := NewLocalBackend(dir)
	if err != nil {
		return nil, err
	}
	b.clearTemps()
	s, err := OpenBackend(context.Background(), b)
	if err != nil {
		return nil, err
	}
	s.dir = dir
	return s, nil
}

// OpenBackend opens (creating when empty) the repository stored in b and
// reads its index.
func OpenBackend(ctx context.Context, b Backend) (*Store, error) {
	s := newStore(b)
	if err := s.checkLayout(ctx, true); err != nil {
		return nil, err
	}
	if err := s.loadIndexes(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// OpenExisting opens the repository in dir for reading (export, verify)
// while a daemon may be writing to it: it changes nothing on disk.
func OpenExisting(dir string) (*Store, error) {
	if _, err := os.Stat(filepath.Join(dir, "snapshots")); err != nil {
		return nil, fmt.Errorf("no backup repository at %s: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "chunks")); err == nil {
		return nil, fmt.Errorf("%s: %w", dir, ErrOldLayout)
	}
	s, err := OpenExistingBackend(context.Background(), &LocalBackend{dir: dir})
	if err != nil {
		return nil, err
	}
	s.dir = dir
	return s, nil
}

// OpenExistingBackend opens the repository stored in b for reading
// (export, verify) while a daemon may be writing to it: it changes nothing
// in b and never creates a repository.
func OpenExistingBackend(ctx context.Context, b Backend) (*Store, error) {
	s := newStore(b)
	s.readOnly = true
	if err := s.checkLayout(ctx, false); err != nil {
		return nil, err
	}
	if err := s.loadIndexes(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func newStore(b Backend) *Store {
	s := &Store{
		b: b, idx: map[blobID]blobLoc{}, packs: map[string][]packEntry{}, indexes: map[string]struct{}{},
		inflight: map[string]struct{}{}, rescued: map[string]struct{}{}, pins: map[blobID]int{},
		listPins: map[int][]blobID{}, policy: DefaultPolicy(),
		held: map[string]int{}, condemned: map[string]struct{}{},
	}
	s.unpinned = sync.NewCond(&s.mu)
	return s
}

// checkLayout refuses a repository of the old layout and, when create,
// writes the config object of an empty one.
func (s *Store) checkLayout(ctx context.Context, create bool) error {
	_, err := s.b.Get(ctx, "config", 0, -1)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, p := range []string{"chunks/", "snapshots/"} {
		objs, err := s.b.List(ctx, p)
		if err != nil {
			return err
		}
		if len(objs) > 0 {
			return ErrOldLayout
		}
	}
	if !create {
		return nil
	}
	return s.b.Put(ctx, "config", []byte(layoutConfig))
}

// loadIndexes reads every index object into the in-memory index. A damaged
// one is skipped: its packs are found again from their trailers (rescan).
func (s *Store) loadIndexes(ctx context.Context) error {
	objs, err := s.b.List(ctx, "index/")
	if err != nil {
		return err
	}
	for _, o := range objs {
		b, err := s.b.Get(ctx, o.Name, 0, -1)
		if errors.Is(err, fs.ErrNotExist) {
			continue // replaced by a GC meanwhile
		}
		if err != nil {
			return err
		}
		packs, err := parseIndex(b)
		s.mu.Lock()
		s.indexes[o.Name] = struct{}{}
		if err == nil {
			for _, p := range packs {
				s.addPackLocked(p.ID, p.Entries)
			}
		}
		s.mu.Unlock()
	}
	return nil
}

// reload reads the index objects again into a fresh in-memory index
// (read-only stores: another process's GC replaced them; shared ones:
// another node's). Index objects this process stores meanwhile (a backup
// committing) are read into it too before it replaces the old one.
func (s *Store) reload(ctx context.Context) error {
	s.mu.Lock()
	before := maps.Clone(s.indexes)
	s.mu.Unlock()
	fresh := newStore(s.b)
	if err := fresh.loadIndexes(ctx); err != nil {
		return err
	}
	for {
		s.mu.Lock()
		var added []string
		for n := range s.indexes {
			_, old := before[n]
			_, in := fresh.indexes[n]
			if !old && !in {
				added = append(added, n)
			}
		}
		if len(added) == 0 {
			s.idx, s.packs, s.indexes = fresh.idx, fresh.packs, fresh.indexes
			s.mu.Unlock()
			return nil
		}
		s.mu.Unlock()
		for _, n := range added {
			b, err := s.b.Get(ctx, n, 0, -1)
			fresh.indexes[n] = struct{}{}
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if packs, err := parseIndex(b); err == nil {
				for _, p := range packs {
					fresh.addPackLocked(p.ID, p.Entries)
				}
			}
		}
	}
}

// addPackLocked adds a pack's blobs to the index; a blob already indexed
// keeps its place (a duplicate in another pack is dead).
func (s *Store) addPackLocked(id string, es []packEntry) {
	if _, ok := s.packs[id]; ok {
		return
	}
	s.packs[id] = es
	for _, e := range es {
		if _, ok := s.idx[e.Hash]; !ok {
			s.idx[e.Hash] = blobLoc{pack: id, off: e.Off, n: e.Len, pl: e.Plain}
		}
	}
}

// Dir is the repository's directory ("" when it is not local).
func (s *Store) Dir() string { return s.dir }

func manifestName(server, backup string) string {
	return "snapshots/" + server + "/" + backup + ".json"
}

// Manifest describes one backup.
type Manifest struct {
	Version int       `json:"version"`
	Server  string    `json:"server"`
	Backup  string    `json:"backup"`
	Created time.Time `json:"created"`
	// Size is the length of the tar stream (the backup's logical size).
	Size int64 `json:"size"`
	// SHA1 is the checksum given to the panel: ChunkListSHA1 of Chunks.
	SHA1   string  `json:"sha1"`
	Chunks []Chunk `json:"chunks"`
	// Files indexes the regular files whose tar entry (header, content,
	// padding) is chunked on its own, so that the next backup of the
	// server can reuse an unchanged file's chunks without reading it.
	Files []File `json:"files,omitempty"`
	// Bare says the stream has no integrity entry (the backup repository
	// stores its streams so since the chunks carry their own hashes;
	// archive.Seal adds the entry for a download). Older manifests lack
	// it: their streams have the entry.
	Bare bool `json:"bare,omitempty"`
}

// File is a regular file of a backup: what says it is unchanged (its
// stat), its content's SHA-1 (its integrity entry line; none in a bare
// backup), and where its entry's chunks are in Manifest.Chunks.
type File struct {
	Path    string `json:"p"`
	Size    int64  `json:"s"`
	MtimeNs int64  `json:"m"`
	CtimeNs int64  `json:"c"`
	Ino     uint64 `json:"i"`
	Dev     uint64 `json:"d"`
	Mode    uint32 `json:"o"`
	SHA1    string `json:"h"`
	First   int    `json:"f"` // index of its first chunk
	Count   int    `json:"n"`
}

// Entry is the chunks of f's tar entry in m.
func (m *Manifest) Entry(f File) ([]Chunk, bool) {
	if f.First < 0 || f.Count < 0 || f.First > len(m.Chunks) || f.Count > len(m.Chunks)-f.First {
		return nil, false
	}
	return m.Chunks[f.First : f.First+f.Count], true
}

// Chunk is one piece of a backup's tar stream.
type Chunk struct {
	Hash string `json:"h"` // SHA-256 of the plain bytes
	Len  int64  `json:"n"`
}

// ParseManifest decodes and checks a stored manifest, binary or JSON:
// every chunk hash is 64 hex digits, every length that of a chunk, and
// every file's chunks are in the list.
func ParseManifest(b []byte) (Manifest, error) {
	var m Manifest
	if isBinaryManifest(b) {
		var err error
		if m, err = decodeManifestBin(b); err != nil {
			return Manifest{}, err
		}
	} else if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, err
	}
	if m.Version < 3 {
		return Manifest{}, fmt.Errorf("manifest version %d is of the old layout", m.Version)
	}
	var size int64
	for i, c := range m.Chunks {
		if _, err := parseHash(c.Hash); err != nil || c.Len <= 0 || c.Len > maxChunk {
			return Manifest{}, fmt.Errorf("manifest: chunk %d is invalid", i)
		}
		size += c.Len
	}
	if size != m.Size {
		return Manifest{}, fmt.Errorf("manifest: chunks make %d bytes, size says %d", size, m.Size)
	}
	for i, f := range m.Files {
		if _, ok := m.Entry(f); !ok {
			return Manifest{}, fmt.Errorf("manifest: file %d names chunks %d+%d of %d", i, f.First, f.Count, len(m.Chunks))
		}
	}
	return m, nil
}

func parseHash(h string) (blobID, error) {
	var id blobID
	if len(h) != 64 {
		return id, errors.New("bad hash")
	}
	_, err := hex.Decode(id[:], []byte(h))
	return id, err
}

// ChunkError is a chunk missing or not matching its hash.
type ChunkError struct {
	Hash   string
	Offset int64 // where it starts in the tar stream
	Err    error
}

func (e *ChunkError) Error() string {
	return fmt.Sprintf("chunk %s (at byte %d of the backup) is damaged: %v", e.Hash[:16], e.Offset, e.Err)
}

func (e *ChunkError) Unwrap() error { return e.Err }

// ChunkListSHA1 is a backup's checksum: the SHA-1 of the lines
// "<chunk sha256 hex> <length>\n" of its chunks in order. The chunks are
// named by the SHA-256 of their bytes, so it commits to the tar stream
// without the stream being read (unchanged files are not).
func ChunkListSHA1(cs []Chunk) string {
	h := sha1.New()
	// The lines are hashed 32 KiB at a time (fmt.Fprintf per chunk was
	// ~10 ms for 37,000 chunks, a Write per line ~4 ms for 70,000).
	buf := make([]byte, 0, 32<<10)
	for _, c := range cs {
		if len(buf) > cap(buf)-len(c.Hash)-32 {
			h.Write(buf)
			buf = buf[:0]
		}
		buf = append(buf, c.Hash...)
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, c.Len, 10)
		buf = append(buf, '\n')
	}
	h.Write(buf)
	return hex.EncodeToString(h.Sum(nil))
}

// Manifest reads the manifest of a backup of server, or ErrNotFound. In
// a shared repository, a backup this node adopted from another
// (adopt.go) is found under its copy's name when the original is gone.
func (s *Store) Manifest(server, backup string) (Manifest, error) {
	_, m, err := s.ManifestRef(server, backup)
	return m, err
}

// manifestAt reads the manifest stored under the name backup.
func (s *Store) manifestAt(server, backup string) (Manifest, error) {
	b, err := s.b.Get(context.Background(), manifestName(server, backup), 0, -1)
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, ErrNotFound
	}
	if err != nil {
		return Manifest{}, err
	}
	m, err := ParseManifest(b)
	if err != nil {
		return Manifest{}, fmt.Errorf("manifest of backup %s: %w", backup, err)
	}
	return m, nil
}

// manifestObject splits a manifest's object name; ok false for others.
func manifestObject(name string) (server, backup string, ok bool) {
	rest, ok := strings.CutPrefix(name, "snapshots/")
	server, file, ok2 := strings.Cut(rest, "/")
	backup, ok3 := strings.CutSuffix(file, ".json")
	if !ok || !ok2 || !ok3 || strings.Contains(file, "/") || server == "" || backup == "" {
		return "", "", false
	}
	return server, backup, true
}

// Find reads the manifest of backup whichever server it belongs to.
func (s *Store) Find(backup string) (Manifest, error) {
	objs, err := s.b.List(context.Background(), "snapshots/")
	if err != nil {
		return Manifest{}, err
	}
	for _, o := range objs {
		if srv, b, ok := manifestObject(o.Name); ok && b == backup {
			return s.Manifest(srv, b)
		}
	}
	return Manifest{}, ErrNotFound
}

// List returns every manifest in the store.
func (s *Store) List() ([]Manifest, error) {
	objs, err := s.b.List(context.Background(), "snapshots/")
	if err != nil {
		return nil, err
	}
	var out []Manifest
	for _, o := range objs {
		srv, b, ok := manifestObject(o.Name)
		if !ok {
			continue
		}
		m, err := s.Manifest(srv, b)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// Delete removes a backup's manifest; its blobs go at the next GC. In a
// shared repository this node's adopted copy (adopt.go) goes too.
func (s *Store) Delete(server, backup string) error {
	if a := s.adoptedName(backup); a != "" && s.exists(manifestName(server, a)) {
		if err := s.deleteManifest(server, a); err != nil {
			return err
		}
		if err := s.deleteManifest(server, backup); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		return nil
	}
	return s.deleteManifest(server, backup)
}

// deleteManifest removes the manifest stored under the name backup.
func (s *Store) deleteManifest(server, backup string) error {
	ctx := context.Background()
	name := manifestName(server, backup)
	if !s.exists(name) {
		return ErrNotFound
	}
	s.mu.Lock()
	s.latest.dropBackup(server, backup)
	s.mu.Unlock()
	// The view index goes first: a crash in between leaves a backup
	// without one (listed from its manifest), never an index of no backup.
	if err := s.deleteViewIndex(ctx, server, backup); err != nil {
		return err
	}
	return s.b.Delete(ctx, name)
}

// exists tells whether the object name is stored (listing its directory:
// a Backend has no stat).
func (s *Store) exists(name string) bool {
	objs, err := s.b.List(context.Background(), path.Dir(name)+"/")
	if err != nil {
		return true // when in doubt, the caller does not act on absence
	}
	for _, o := range objs {
		if o.Name == name {
			return true
		}
	}
	return false
}

// Usage is the bytes the repository's objects take.
func (s *Store) Usage() (int64, error) {
	objs, err := s.b.List(context.Background(), "")
	var n int64
	for _, o := range objs {
		n += o.Size
	}
	return n, err
}

// pinLocked pins h for a backup's set pinned.
func (s *Store) pinLocked(h blobID, pinned map[blobID]struct{}) {
	if _, ok := pinned[h]; !ok {
		pinned[h] = struct{}{}
		s.pins[h]++
	}
}

// pinIfIndexed pins h when the repository has it: from then on no GC
// removes it until the backup ends.
func (s *Store) pinIfIndexed(h blobID, pinned map[blobID]struct{}) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.idx[h]; !ok {
		return false
	}
	s.pinLocked(h, pinned)
	return true
}

// pinListLocked pins every blob of list, an earlier backup's chunks, at
// once: a second backup reuses tens of thousands of them, and a count per
// blob cost milliseconds to take and to drop. It returns the key that
// unpins them.
func (s *Store) pinListLocked(list []blobID) int {
	s.lastPin++
	s.listPins[s.lastPin] = list
	return s.lastPin
}

// pinnedByLists is the set of the blobs of every list pinned (GC).
func (s *Store) pinnedByLists() map[blobID]struct{} {
	set := map[blobID]struct{}{}
	for _, list := range s.listPins {
		for _, h := range list {
			set[h] = struct{}{}
		}
	}
	return set
}

// unpin drops a backup's pins: the set pinned and the lists.
func (s *Store) unpin(pinned map[blobID]struct{}, lists []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unpinLocked(pinned, lists)
}

// unpinLater drops a committed writer's pins on another goroutine; see
// waitUnpinned.
func (s *Store) unpinLater(pinned map[blobID]struct{}, lists []int) {
	s.mu.Lock()
	s.unpins++
	s.mu.Unlock()
	s.bg.Go(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.unpinLocked(pinned, lists)
		s.unpins--
		s.unpinned.Broadcast()
	})
}

// waitUnpinned waits, s.mu held, until no committed writer's pins are
// being dropped.
func (s *Store) waitUnpinned() {
	for s.unpins > 0 {
		s.unpinned.Wait()
	}
}

func (s *Store) unpinLocked(pinned map[blobID]struct{}, lists []int) {
	for h := range pinned {
		if s.pins[h]--; s.pins[h] <= 0 {
			delete(s.pins, h)
		}
	}
	for _, k := range lists {
		delete(s.listPins, k)
	}
}
