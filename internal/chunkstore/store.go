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
	"slices"
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

// manifestVersion 2: the checksum is ChunkListSHA1 and the manifest has a
// file index; version 1's checksum was the SHA-1 of the tar stream.
const manifestVersion = 2

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
	// SHA1 is the checksum given to the panel: ChunkListSHA1 of Chunks
	// (version 2), the SHA-1 of the tar stream (version 1).
	SHA1   string  `json:"sha1"`
	Chunks []Chunk `json:"chunks"`
	// Files indexes the regular files whose tar entry (header, content,
	// padding) is chunked on its own (version 2), so that the next backup
	// of the server can reuse an unchanged file's chunks without reading it.
	Files []File `json:"files,omitempty"`
}

// File is a regular file of a backup: what says it is unchanged (its
// stat), its content's SHA-1 (its integrity entry line), and where its
// entry's chunks are in Manifest.Chunks.
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
	if f.First < 0 || f.Count < 0 || f.First+f.Count > len(m.Chunks) {
		return nil, false
	}
	return m.Chunks[f.First : f.First+f.Count], true
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
	w := s.NewWriter(server, backup)
	defer w.Abort()
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(w, onlyRead{r}, buf); err != nil {
		return Manifest{}, err
	}
	return w.Commit()
}

type onlyRead struct{ io.Reader }

// segmentFlush is how much of a segment is buffered before its chunks,
// but the last, are cut; the last one may grow with the next bytes.
const segmentFlush = 8 << 20

// Writer stores a backup's tar stream as it is written. The stream is
// made of segments (Cut ends one): each is chunked on its own, so a
// segment's chunks depend only on its bytes. The backup repository makes
// each regular file's tar entry a segment, and then reuses an unchanged
// file's chunks (Reuse) without reading it.
type Writer struct {
	s      *Store
	m      Manifest
	seg    []byte
	ch     *chunker.Chunker
	chBuf  []byte
	pinned map[string]struct{}

	jobs  chan chunkJob
	errc  chan error
	wg    sync.WaitGroup
	resMu sync.Mutex
	err   error
	done  bool
}

type chunkJob struct {
	i    int
	data []byte
}

// NewWriter starts backup of server; Commit ends it, Abort drops it.
func (s *Store) NewWriter(server, backup string) *Writer {
	w := &Writer{
		s:      s,
		m:      Manifest{Version: manifestVersion, Server: server, Backup: backup, Created: time.Now().UTC()},
		pinned: map[string]struct{}{},
		chBuf:  make([]byte, chunker.MaxSize),
	}
	w.ch = chunker.NewWithBoundaries(bytes.NewReader(nil), pol, minChunk, maxChunk)
	w.ch.SetAverageBits(averageBits)
	workers := max(2, min(8, runtime.GOMAXPROCS(0)))
	w.jobs = make(chan chunkJob, workers)
	w.errc = make(chan error, workers)
	for range workers {
		w.wg.Go(func() {
			for j := range w.jobs {
				h := sha256.Sum256(j.data)
				hs := hex.EncodeToString(h[:])
				if err := s.put(hs, j.data, w.pinned); err != nil {
					select {
					case w.errc <- err:
					default:
					}
				}
				w.resMu.Lock()
				w.m.Chunks[j.i].Hash = hs
				w.resMu.Unlock()
			}
		})
	}
	return w
}

// Write adds p to the current segment.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.seg = append(w.seg, p...)
	if len(w.seg) >= segmentFlush {
		w.chunk(false)
	}
	return len(p), w.err
}

// Cut ends the current segment: the next byte starts a chunk.
func (w *Writer) Cut() error {
	if w.err == nil && len(w.seg) > 0 {
		w.chunk(true)
	}
	return w.err
}

// Len is the number of chunks so far (call after Cut).
func (w *Writer) Len() int {
	w.resMu.Lock()
	defer w.resMu.Unlock()
	return len(w.m.Chunks)
}

// chunk cuts the buffered segment into chunks and stores them; unless
// final, the last chunk's bytes stay buffered (more of the segment may
// follow, and the chunker would cut it elsewhere).
func (w *Writer) chunk(final bool) {
	w.ch.ResetWithBoundaries(bytes.NewReader(w.seg), pol, minChunk, maxChunk)
	w.ch.SetAverageBits(averageBits)
	var off int
	for {
		c, err := w.ch.Next(w.chBuf)
		if err == io.EOF {
			break
		}
		if err != nil {
			w.err = err
			return
		}
		if !final && off+int(c.Length) == len(w.seg) {
			break
		}
		w.resMu.Lock()
		i := len(w.m.Chunks)
		w.m.Chunks = append(w.m.Chunks, Chunk{Len: int64(c.Length)})
		w.resMu.Unlock()
		w.m.Size += int64(c.Length)
		off += int(c.Length)
		select {
		case w.jobs <- chunkJob{i, bytes.Clone(c.Data)}:
		case w.err = <-w.errc:
			return
		}
	}
	w.seg = w.seg[:copy(w.seg, w.seg[off:])]
}

// Reuse ends the current segment and appends chunks of the backup
// LatestFiles read (a file's unchanged entry; they are pinned and on disk).
func (w *Writer) Reuse(cs []Chunk) bool {
	if w.Cut() != nil {
		return false
	}
	w.resMu.Lock()
	w.m.Chunks = append(w.m.Chunks, cs...)
	w.resMu.Unlock()
	for _, c := range cs {
		w.m.Size += c.Len
	}
	return true
}

// AddFile records a file of the backup in the manifest's file index.
func (w *Writer) AddFile(f File) { w.m.Files = append(w.m.Files, f) }

// stop ends the workers and returns the first error.
func (w *Writer) stop() error {
	if w.done {
		return w.err
	}
	w.done = true
	close(w.jobs)
	w.wg.Wait()
	if w.err == nil {
		select {
		case w.err = <-w.errc:
		default:
		}
	}
	return w.err
}

// Abort drops an unfinished backup (its chunks go at the next GC).
func (w *Writer) Abort() {
	_ = w.stop()
	w.s.unpin(w.pinned)
	w.pinned = map[string]struct{}{}
}

// Commit writes the manifest once every chunk is on disk.
func (w *Writer) Commit() (Manifest, error) {
	if err := w.Cut(); err != nil {
		w.Abort()
		return Manifest{}, err
	}
	if err := w.stop(); err != nil {
		w.Abort()
		return Manifest{}, err
	}
	defer w.Abort()
	s, m := w.s, w.m
	m.SHA1 = ChunkListSHA1(m.Chunks)
	// Every chunk must be on disk before a manifest names it.
	if err := syncfs(s.dir); err != nil {
		return Manifest{}, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return Manifest{}, err
	}
	p := s.manifestPath(m.Server, m.Backup)
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

// ChunkListSHA1 is a version 2 backup's checksum: the SHA-1 of the lines
// "<chunk sha256 hex> <length>\n" of its chunks in order. The chunks are
// named by the SHA-256 of their bytes, so it commits to the tar stream
// without the stream being read (unchanged files are not).
func ChunkListSHA1(cs []Chunk) string {
	h := sha1.New()
	for _, c := range cs {
		fmt.Fprintf(h, "%s %d\n", c.Hash, c.Len)
	}
	return hex.EncodeToString(h.Sum(nil))
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

// PrevFile is a file of an earlier backup with its entry's chunks.
type PrevFile struct {
	File
	Chunks []Chunk
}

// LatestFiles is the file index of the latest backup of server, by path;
// nil when there is none with an index. Manifests are written once, so
// the newest file is the latest backup: only it is parsed (a manifest is
// large for a server of many files).
//
// Every chunk of that backup is pinned for w, and only then is its
// manifest checked to be still there: a chunk a manifest names is removed
// by no GC (see GC), so each reused chunk is on disk without a stat each.
func (w *Writer) LatestFiles(server string) map[string]PrevFile {
	s := w.s
	ps, _ := filepath.Glob(filepath.Join(s.dir, "snapshots", server, "*.json"))
	mtime := map[string]time.Time{}
	for _, p := range ps {
		if fi, err := os.Stat(p); err == nil {
			mtime[p] = fi.ModTime()
		}
	}
	slices.SortFunc(ps, func(a, b string) int { return mtime[b].Compare(mtime[a]) })
	var latest *Manifest
	for _, p := range ps {
		m, err := s.Manifest(server, strings.TrimSuffix(filepath.Base(p), ".json"))
		if err == nil && len(m.Files) > 0 {
			latest = &m
			break
		}
	}
	if latest == nil {
		return nil
	}
	s.mu.Lock()
	for _, c := range latest.Chunks {
		if _, ok := w.pinned[c.Hash]; !ok {
			w.pinned[c.Hash] = struct{}{}
			s.pins[c.Hash]++
		}
	}
	s.mu.Unlock()
	if _, err := os.Stat(s.manifestPath(latest.Server, latest.Backup)); err != nil {
		return nil // deleted meanwhile: its chunks may be gone
	}
	out := make(map[string]PrevFile, len(latest.Files))
	for _, f := range latest.Files {
		if cs, ok := latest.Entry(f); ok {
			out[f.Path] = PrevFile{File: f, Chunks: cs}
		}
	}
	return out
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
