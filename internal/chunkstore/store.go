// Package chunkstore is the deduplicating backup repository
// (system.backups.format: repository, docs/backup-repository.md).
//
// A backup is the same uncompressed tar stream the archive format would
// gzip, split into content-defined chunks (restic's Rabin chunker). Each
// chunk is stored once, zstd-compressed, under the SHA-256 of its plain
// bytes; a backup is a small manifest listing its chunks in order. Reading
// a backup back re-hashes every chunk, so a corrupt chunk is always seen.
//
// Layout under the repository directory:
//
//	chunks/<2 hex>/<64 hex>        a chunk (zstd of its bytes)
//	snapshots/<server>/<backup>.json  a backup's manifest
//	tmp/                           chunks being written (cleared at Open)
//
// Crash safety: a chunk appears under its name only by rename, after being
// written whole; a manifest is written (atomically) only after the
// filesystem was synced, so no manifest ever names a chunk that is not on
// disk. A crash leaves at most unreferenced chunks, which GC removes.
package chunkstore

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/restic/chunker"
	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/atomicfile"
)

// ErrNotFound is a backup with no manifest in the store.
var ErrNotFound = errors.New("backup not found in the repository")

// pol is the chunker's polynomial. It is fixed for every repository: the
// chunk boundaries, hence the deduplication between backups, depend on it.
const pol = chunker.Pol(0x3DA3358B4DC173)

const manifestVersion = 1

// Chunk sizes: ~128 KiB on average (smaller than restic's 1 MiB), so that
// a small change to a server, which also rewrites the archive's integrity
// entry at its end, adds little to the store. Fixed for every repository,
// like pol.
const (
	minChunk    = 32 << 10
	maxChunk    = 2 << 20
	averageBits = 17
)

// Manifest describes one backup.
type Manifest struct {
	Version int       `json:"version"`
	Server  string    `json:"server"`
	Backup  string    `json:"backup"`
	Created time.Time `json:"created"`
	// Size is the length of the tar stream (the backup's logical size).
	Size int64 `json:"size"`
	// SHA1 is the SHA-1 of the tar stream: the checksum given to the panel.
	SHA1   string  `json:"sha1"`
	Chunks []Chunk `json:"chunks"`
}

// Chunk is one piece of a backup's tar stream.
type Chunk struct {
	Hash string `json:"h"` // SHA-256 of the plain bytes
	Len  int64  `json:"n"`
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

// Store is an open repository. Backups may run concurrently with each
// other and with GC in one process (see GC for why that is safe).
type Store struct {
	dir string

	mu       sync.Mutex
	pins     map[string]int      // chunks used by backups being written
	gcActive bool                // a GC is running
	gcKeep   map[string]struct{} // chunks of backups finished during a GC

	afterMark func() // tests: runs between GC's reading of the manifests and its removals
}

// Open opens (creating when absent) the repository in dir and removes
// what a crash left in tmp/.
func Open(dir string) (*Store, error) {
	for _, d := range []string{"chunks", "snapshots", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if ents, err := os.ReadDir(filepath.Join(dir, "tmp")); err == nil {
		for _, e := range ents {
			_ = os.Remove(filepath.Join(dir, "tmp", e.Name()))
		}
	}
	return &Store{dir: dir, pins: map[string]int{}}, nil
}

// OpenExisting opens the repository in dir for reading (export, verify)
// while a daemon may be writing to it: it changes nothing on disk.
func OpenExisting(dir string) (*Store, error) {
	if _, err := os.Stat(filepath.Join(dir, "snapshots")); err != nil {
		return nil, fmt.Errorf("no backup repository at %s: %w", dir, err)
	}
	return &Store{dir: dir, pins: map[string]int{}}, nil
}

// Dir is the repository's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) chunkPath(h string) string { return filepath.Join(s.dir, "chunks", h[:2], h) }

func (s *Store) manifestPath(server, backup string) string {
	return filepath.Join(s.dir, "snapshots", server, backup+".json")
}

var (
	encPool = sync.Pool{New: func() any {
		e, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		return e
	}}
	decPool = sync.Pool{New: func() any {
		d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
		return d
	}}
)

// Write stores the tar stream r as backup of server. The server and backup
// must be safe path elements (the caller checks UUIDs).
func (s *Store) Write(server, backup string, r io.Reader) (Manifest, error) {
	m := Manifest{Version: manifestVersion, Server: server, Backup: backup, Created: time.Now().UTC()}
	sum := sha1.New()
	ch := chunker.NewWithBoundaries(io.TeeReader(r, sum), pol, minChunk, maxChunk)
	ch.SetAverageBits(averageBits)
	pinned := map[string]struct{}{}
	defer s.unpin(pinned)

	type job struct {
		i    int
		data []byte
	}
	workers := max(2, min(8, runtime.GOMAXPROCS(0)))
	jobs := make(chan job, workers)
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	var resMu sync.Mutex
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				h := sha256.Sum256(j.data)
				hs := hex.EncodeToString(h[:])
				if err := s.put(hs, j.data, pinned); err != nil {
					select {
					case errc <- err:
					default:
					}
				}
				resMu.Lock()
				m.Chunks[j.i].Hash = hs
				resMu.Unlock()
			}
		})
	}
	var rerr error
	buf := make([]byte, chunker.MaxSize)
	for i := 0; ; i++ {
		c, err := ch.Next(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			rerr = err
			break
		}
		resMu.Lock()
		m.Chunks = append(m.Chunks, Chunk{Len: int64(c.Length)})
		resMu.Unlock()
		m.Size += int64(c.Length)
		select {
		case jobs <- job{i, bytes.Clone(c.Data)}:
		case rerr = <-errc:
		}
		if rerr != nil {
			break
		}
	}
	close(jobs)
	wg.Wait()
	if rerr == nil {
		select {
		case rerr = <-errc:
		default:
		}
	}
	if rerr != nil {
		return Manifest{}, rerr
	}
	m.SHA1 = hex.EncodeToString(sum.Sum(nil))
	// Every chunk must be on disk before a manifest names it.
	if err := syncfs(s.dir); err != nil {
		return Manifest{}, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return Manifest{}, err
	}
	p := s.manifestPath(server, backup)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return Manifest{}, err
	}
	if err := atomicfile.WriteFile(p, b, 0o600); err != nil {
		return Manifest{}, err
	}
	s.mu.Lock()
	if s.gcActive {
		for _, c := range m.Chunks {
			s.gcKeep[c.Hash] = struct{}{}
		}
	}
	s.mu.Unlock()
	return m, nil
}

// put stores a chunk unless it is there. The chunk is pinned first, so a
// concurrent GC cannot remove it between the check and the manifest.
func (s *Store) put(h string, data []byte, pinned map[string]struct{}) error {
	s.mu.Lock()
	if _, ok := pinned[h]; !ok {
		pinned[h] = struct{}{}
		s.pins[h]++
	}
	s.mu.Unlock()
	p := s.chunkPath(h)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	enc := encPool.Get().(*zstd.Encoder)
	z := enc.EncodeAll(data, make([]byte, 0, len(data)/2))
	encPool.Put(enc)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "chunk-")
	if err != nil {
		return err
	}
	if _, err := f.Write(z); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), p)
}

func (s *Store) unpin(pinned map[string]struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for h := range pinned {
		if s.pins[h]--; s.pins[h] <= 0 {
			delete(s.pins, h)
		}
	}
}

// Manifest reads the manifest of a backup of server, or ErrNotFound.
func (s *Store) Manifest(server, backup string) (Manifest, error) {
	b, err := os.ReadFile(s.manifestPath(server, backup))
	if errors.Is(err, os.ErrNotExist) {
		return Manifest{}, ErrNotFound
	}
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("manifest of backup %s: %w", backup, err)
	}
	return m, nil
}

// Find reads the manifest of backup whichever server it belongs to.
func (s *Store) Find(backup string) (Manifest, error) {
	ms, _ := filepath.Glob(filepath.Join(s.dir, "snapshots", "*", backup+".json"))
	if len(ms) == 0 {
		return Manifest{}, ErrNotFound
	}
	return s.Manifest(filepath.Base(filepath.Dir(ms[0])), backup)
}

// List returns every manifest in the store.
func (s *Store) List() ([]Manifest, error) {
	ps, err := filepath.Glob(filepath.Join(s.dir, "snapshots", "*", "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Manifest
	for _, p := range ps {
		m, err := s.Manifest(filepath.Base(filepath.Dir(p)), strings.TrimSuffix(filepath.Base(p), ".json"))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// Delete removes a backup's manifest; its chunks go at the next GC.
func (s *Store) Delete(server, backup string) error {
	p := s.manifestPath(server, backup)
	if err := os.Remove(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ErrNotFound
		}
		return err
	}
	if d, err := os.Open(filepath.Dir(p)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// readChunk returns the plain bytes of chunk c, checked against its hash.
func (s *Store) readChunk(c Chunk, off int64) ([]byte, error) {
	z, err := os.ReadFile(s.chunkPath(c.Hash))
	if err != nil {
		return nil, &ChunkError{Hash: c.Hash, Offset: off, Err: err}
	}
	dec := decPool.Get().(*zstd.Decoder)
	b, err := dec.DecodeAll(z, make([]byte, 0, c.Len))
	decPool.Put(dec)
	if err != nil {
		return nil, &ChunkError{Hash: c.Hash, Offset: off, Err: err}
	}
	h := sha256.Sum256(b)
	if hex.EncodeToString(h[:]) != c.Hash || int64(len(b)) != c.Len {
		return nil, &ChunkError{Hash: c.Hash, Offset: off, Err: errors.New("content does not match its hash")}
	}
	return b, nil
}

// GC removes the chunks no manifest names. It is safe against backups
// being written at the same time in this process: a chunk a backup uses is
// pinned before the backup checks that it exists, and the chunks of a
// backup finished during the GC are kept even when its manifest was
// written after the GC read the manifests. It returns the chunks removed.
func (s *Store) GC() (int, error) {
	s.mu.Lock()
	if s.gcActive {
		s.mu.Unlock()
		return 0, nil
	}
	s.gcActive, s.gcKeep = true, map[string]struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.gcActive, s.gcKeep = false, nil
		s.mu.Unlock()
	}()
	ms, err := s.List()
	if err != nil {
		return 0, err
	}
	if s.afterMark != nil {
		s.afterMark()
	}
	used := map[string]struct{}{}
	for _, m := range ms {
		for _, c := range m.Chunks {
			used[c.Hash] = struct{}{}
		}
	}
	removed := 0
	dirs, err := os.ReadDir(filepath.Join(s.dir, "chunks"))
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		ents, err := os.ReadDir(filepath.Join(s.dir, "chunks", d.Name()))
		if err != nil {
			continue
		}
		for _, e := range ents {
			h := e.Name()
			if _, ok := used[h]; ok {
				continue
			}
			s.mu.Lock()
			_, kept := s.gcKeep[h]
			if s.pins[h] == 0 && !kept {
				if os.Remove(s.chunkPath(h)) == nil {
					removed++
				}
			}
			s.mu.Unlock()
		}
	}
	return removed, nil
}

// Usage is the bytes the repository's chunks take on disk.
func (s *Store) Usage() (int64, error) {
	var n int64
	err := filepath.WalkDir(s.dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n, err
}

func syncfs(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}
