package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"
	"golang.org/x/time/rate"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
)

// ReceiveLive runs an incoming live transfer of server id from body (a
// live stream, docs/live-transfers.md). As with Receive, the server is
// registered first; the files are written into its directory pass by pass,
// and only after the final pass has been checked against the source's
// manifest is the container created and success reported. version is the
// stream's wire version (SpeaksLive). restored, when set, tells the source
// that the snapshot a version-5 stream named is restored (livemanifest.go):
// an informational answer (102 with LiveRestoredHeader).
func (svc *Service) ReceiveLive(ctx context.Context, id string, version int, body io.Reader, unblock, restored func()) error {
	return svc.receiveWith(ctx, id, unblock, func(t *Transfer, job *server.Job) error {
		return svc.fillLive(t, job, version, body, restored)
	})
}

func (svc *Service) fillLive(t *Transfer, job *server.Job, version int, body io.Reader, restored func()) error {
	s := job.Server()
	cfg := svc.opts.Config.Get()
	cr, err := newChunkReader(ctxReader{t.ctx, body})
	if err != nil {
		return err
	}
	defer cr.Close()
	a := &applier{
		ctx: job.Context(), dst: job.FS().Trusted(), r: recReader{cr}, h: newContentHash(),
		maxWrite: 1 << 20, sums: map[pathKey]fileSum{},
		noInstallLog: version < 3, v4: version >= 4, maxLinks: maxHardLinks,
		v5: version >= liveManifestVersion, restore: svc.liveRestorer(t.server, job.FS().Trusted()), restored: restored,
		log: func(pass uint64, phase byte) {
			svc.opts.Log.Info("live transfer pass", "server", t.server, "direction", "incoming", "pass", pass, "phase", phase)
		},
	}
	if limit := int64(cfg.System.Transfers.DownloadLimit) * 1024 * 1024; limit > 0 {
		burst := int(min(limit, 1<<30))
		a.limiter = rate.NewLimiter(rate.Limit(limit), burst)
		a.maxWrite = min(a.maxWrite, burst)
	}
	if err := a.run(); err != nil {
		if t.ctx.Err() != nil {
			return context.Cause(t.ctx)
		}
		return err
	}
	svc.opts.Log.Info("live transfer received and checked against the manifest", "server", t.server,
		"paths", a.manCount, "seeded_files", a.seededFiles, "check", a.checked.Round(time.Millisecond).String())
	if err := svc.mark(svc.markerDir(), t.server, stageContainer); err != nil {
		return err
	}
	if err := s.CreateContainer(t.ctx); err != nil {
		return fmt.Errorf("creating the container: %w", err)
	}
	if a.installLog != nil {
		keepInstallLog(svc.opts.Log, cfg.System.LogDirectory, t.server, a.installLog)
	}
	return nil
}

// fileSum is what the target wrote at a path: checked against the source's
// hash as it arrived, and against the manifest at the end.
type fileSum struct {
	size int64
	sum  contentHash
	// seeded: a file of the snapshot a version-5 stream named, checked
	// chunk by chunk as it was extracted; its manifest entry has no hash.
	seeded bool
}

// pathKey is a path's key in the target's table of received files: the
// XXH3-128 of the path, so that an entry costs the same whatever the
// length of the name the peer chose (docs/live-transfers.md, "Bounds").
type pathKey = [16]byte

func keyOf(rel string) pathKey { return xxh3.HashString128(rel).Bytes() }

// manEntry is one manifest record, checked against the tree as it arrives
// and then forgotten.
type manEntry struct {
	kind   byte
	mode   fs.FileMode
	mtime  int64
	size   int64
	sum    contentHash
	target string
}

// applier writes a live stream into a server's directory.
type applier struct {
	ctx      context.Context
	dst      *sandbox.FS
	r        recReader
	h        *xxh3.Hasher128
	maxWrite int // bytes per write (the rate limiter's burst at most)
	limiter  *rate.Limiter
	// sums: the files the stream wrote and still on disk, by path key
	// (a file's entry goes when it is removed, replaced, or checked
	// against its manifest entry).
	sums  map[pathKey]fileSum
	final bool
	// The manifest is checked entry by entry as it arrives (its paths
	// come in strictly increasing byte order, so no entry is kept to
	// find a duplicate): manCount entries so far, the last one's path.
	manCount uint64
	lastMan  string
	started  bool
	log      func(pass uint64, phase byte)
	// noInstallLog: a version-2 stream, which has no install log record.
	noInstallLog bool
	installLog   []byte // the source's install log (not nil once received)
	// v4: a version-4 stream, which may hold sparse file and hard link
	// records: at most maxLinks of the latter (links so far).
	v4              bool
	links, maxLinks int

	// The open directories down to the last record's (made on first
	// use): each record is applied by one name in its parent, reached
	// from the previous record's, so a deep tree costs linear time and a
	// directory swapped for a link mid-transfer is never followed.
	stack *sandbox.DirStack

	checked time.Duration // how long the check against the manifest took

	// v5: a version-5 stream, which may begin with a snapshot record
	// (restored by restore; nil when this node has no repository) and
	// seed records (livemanifest.go). seeding: between the snapshot
	// record and the first pass, with keep the seeded files and their
	// directories.
	v5          bool
	restore     func(ctx context.Context, repo, name string) error
	restored    func() // told when the seeds end (may be nil)
	seeding     bool
	keep        map[pathKey]bool
	seededFiles int
}

// ErrManifestMismatch: after the final pass the target's tree is not the
// one the source's manifest describes.
var ErrManifestMismatch = fmt.Errorf("%w: the received tree does not match the source's manifest", ErrChecksumMismatch)

func (a *applier) run() error {
	defer func() {
		if a.stack != nil {
			a.stack.Close()
		}
	}()
	for {
		if err := a.ctx.Err(); err != nil {
			return context.Cause(a.ctx)
		}
		kind, err := a.r.byte()
		if err != nil {
			return streamErr(err)
		}
		if err := a.record(kind); err != nil {
			return streamErr(err)
		}
		if kind == recEnd {
			return streamErr(a.r.r.atEnd())
		}
	}
}

// streamErr marks a truncated stream as what it is: the source went away;
// and a record whose path leads out of the root (through a link the stream
// itself made) as a bad stream (400), not a fault of this node.
func streamErr(err error) error {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %w", ErrSourceGone, err)
	case errors.Is(err, sandbox.ErrOutsideRoot):
		return fmt.Errorf("%w: %w", errBadStream, err)
	}
	return err
}

func (a *applier) record(kind byte) error {
	if a.final && kind != recManifest && kind != recEnd && a.manCount > 0 {
		return errBadStream // only manifest records follow the first one
	}
	d := &recDecoder{r: a.r}
	if handled, err := a.v5Record(kind, d); handled {
		return err
	}
	switch kind {
	case recPass:
		pass, phase := d.uvarint(), d.byte()
		if d.err != nil {
			return d.err
		}
		return a.pass(pass, phase)
	case recDir:
		rel, mode, mtime := d.head()
		if d.err != nil {
			return d.err
		}
		return a.dir(rel, mode, mtime)
	case recFile:
		rel, mode, mtime := d.head()
		size := d.uvarint()
		if d.err != nil {
			return d.err
		}
		if size > maxFileSize {
			return fmt.Errorf("%w: a file of %d bytes (at most %d)", errBadStream, size, uint64(maxFileSize))
		}
		return a.file(rel, mode, mtime, int64(size))
	case recLink:
		rel, target, mtime := d.name(), d.str(), d.varint()
		if d.err != nil {
			return d.err
		}
		return a.link(rel, target, mtime)
	case recSparse:
		if !a.v4 {
			return errBadStream
		}
		rel, mode, mtime := d.head()
		size, count := d.uvarint(), d.uvarint()
		if d.err != nil {
			return d.err
		}
		return a.sparseFile(rel, mode, mtime, size, count)
	case recHardLink:
		if !a.v4 {
			return errBadStream
		}
		rel, target := d.name(), d.name()
		if d.err != nil {
			return d.err
		}
		return a.hardLink(rel, target)
	case recDelete:
		rel := d.name()
		if d.err != nil {
			return d.err
		}
		return a.remove(rel)
	case recInstallLog:
		// Once, in the final phase, before the manifest (the check above).
		if !a.final || a.noInstallLog || a.installLog != nil {
			return errBadStream
		}
		n := d.uvarint()
		if d.err != nil {
			return d.err
		}
		if n > maxInstallLog {
			return errBadStream
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(a.r.r, b); err != nil {
			return unexpectedEOF(err)
		}
		a.installLog = b
		return nil
	case recManifest:
		if !a.final {
			return errBadStream
		}
		return a.manifestEntry(d)
	case recEnd:
		n := d.uvarint()
		if d.err != nil {
			return d.err
		}
		if !a.final || n != a.manCount {
			return errBadStream
		}
		return a.verify()
	}
	return errBadStream
}

// pass starts a pass: the first one empties the server's directory.
func (a *applier) pass(pass uint64, phase byte) error {
	if phase != phaseOnline && phase != phaseFinal {
		return errBadStream
	}
	if a.seeding {
		if err := a.prune(); err != nil {
			return err
		}
	}
	if !a.started {
		// The server is new on this node: whatever its directory holds
		// (left by an earlier failed attempt) is not the source's.
		if a.stack != nil {
			a.stack.Leave(".")
		}
		if err := a.dst.RemoveAll(a.ctx, "."); err != nil {
			return err
		}
		clear(a.sums)
		a.started = true
	}
	a.final = phase == phaseFinal
	a.log(pass, phase)
	return nil
}

// enter returns the open directory dir (see sandbox.DirStack), making the
// missing ones when create is set (a file or link in the way is removed,
// never followed).
func (a *applier) enter(dir string, create bool) (*sandbox.Dir, error) {
	if a.stack == nil {
		st, err := a.dst.NewDirStack()
		if err != nil {
			return nil, err
		}
		st.Removed = func(rel string) { delete(a.sums, keyOf(rel)) }
		a.stack = st
	}
	return a.stack.Enter(dir, create)
}

// parent returns the open parent directory of rel (made when missing)
// and rel's last name.
func (a *applier) parent(rel string) (*sandbox.Dir, string, error) {
	d, err := a.enter(path.Dir(rel), true)
	return d, path.Base(rel), err
}

// enterParent returns the open parent directory of rel, which must exist.
func (a *applier) enterParent(rel string) (*sandbox.Dir, string, error) {
	d, err := a.enter(path.Dir(rel), false)
	return d, path.Base(rel), err
}

// clear removes base of d (rel) unless it is of the wanted kind.
func (a *applier) clear(d *sandbox.Dir, rel, base string, want byte) (existed bool, err error) {
	fi, err := d.Lstat(base)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// A file with several names (hard links this stream made) is never
	// written in place: that would change its other names too.
	if k := kindOf(fi.Mode()); k == want && want != 'l' && (k != 'f' || nlink(fi) < 2) {
		return true, nil
	}
	return false, a.removeIn(d, rel, base, fi)
}

// remove removes rel, whatever it is (a record of a path deleted at the
// source); nothing there, or a non-directory on its way, is no error.
func (a *applier) remove(rel string) error {
	d, err := a.enter(path.Dir(rel), false)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, sandbox.ErrNotDir) {
		return nil
	}
	if err != nil {
		return err
	}
	base := path.Base(rel)
	fi, err := d.Lstat(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return a.removeIn(d, rel, base, fi)
}

// removeIn removes base of d (rel, described by fi) and forgets the sums
// of what it held.
func (a *applier) removeIn(d *sandbox.Dir, rel, base string, fi fs.FileInfo) error {
	if !fi.IsDir() {
		if err := d.Remove(base); err != nil {
			return err
		}
		delete(a.sums, keyOf(rel))
		return nil
	}
	// No handle below rel may outlive it: it would write where no path
	// leads. (d, rel's parent, is the stack's top and stays open.)
	a.stack.Leave(rel)
	if err := a.forgetTree(rel); err != nil {
		return err
	}
	return d.RemoveAll(a.ctx, base)
}

// forgetTree drops the entries of the files below the directory rel, about
// to be removed (the table is keyed by hashes: a walk names them).
func (a *applier) forgetTree(rel string) error {
	if len(a.sums) == 0 {
		return nil
	}
	return a.dst.WalkContext(a.ctx, rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			delete(a.sums, keyOf(p))
		}
		return nil
	})
}

func (a *applier) dir(rel string, mode fs.FileMode, mtime int64) error {
	d, base, err := a.parent(rel)
	if err != nil {
		return err
	}
	existed, err := a.clear(d, rel, base, 'd')
	if err == nil && !existed {
		err = d.Mkdir(base, 0o755)
	}
	if err != nil {
		return err
	}
	_ = d.Chmod(base, mode)
	return nil
}

func (a *applier) link(rel, target string, mtime int64) error {
	d, base, err := a.parent(rel)
	if err != nil {
		return err
	}
	if _, err := a.clear(d, rel, base, 'l'); err != nil {
		return err
	}
	if err := d.Symlink(target, base); err != nil {
		return err
	}
	t := time.Unix(0, mtime)
	_ = d.Lchtimes(base, t, t)
	return nil
}

// create opens base of d for writing: created exclusively, or (something
// in the way) an existing regular file truncated, or after removing what
// was there (a directory or link: never written through).
func (a *applier) create(d *sandbox.Dir, rel, base string, mode fs.FileMode) (f *sandbox.File, existed bool, err error) {
	f, err = d.Create(base, mode)
	if !errors.Is(err, fs.ErrExist) {
		return f, false, err
	}
	if existed, err = a.clear(d, rel, base, 'f'); err != nil {
		return nil, false, err
	}
	if existed {
		f, err = d.Rewrite(base)
	} else {
		f, err = d.Create(base, mode)
	}
	return f, existed, err
}

func (a *applier) file(rel string, mode fs.FileMode, mtime, size int64) error {
	return a.writeFile(rel, mode, mtime, size, func(f *sandbox.File) error { return a.copy(f, size) })
}

// writeFile makes or rewrites the file rel with write, then gives it its
// mode and time and checks the record's hash against what write fed a.h
// (the plain and the sparse file records).
func (a *applier) writeFile(rel string, mode fs.FileMode, mtime, size int64, write func(*sandbox.File) error) error {
	d, base, err := a.parent(rel)
	if err != nil {
		return err
	}
	key := keyOf(rel)
	delete(a.sums, key)
	f, existed, err := a.create(d, rel, base, mode)
	if err != nil {
		return err
	}
	a.h.Reset()
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && existed {
		err = d.Chmod(base, mode)
	}
	if err == nil {
		// In nanoseconds (a descriptor's SetTimes keeps microseconds).
		t := time.Unix(0, mtime)
		err = d.Lchtimes(base, t, t)
	}
	if err != nil {
		return err
	}
	want, err := a.r.sum()
	if err != nil {
		return err
	}
	if got := a.h.Sum128().Bytes(); got != want {
		return fmt.Errorf("%w: %s", ErrChecksumMismatch, rel)
	}
	a.sums[key] = fileSum{size: size, sum: want}
	return nil
}

// copy moves size bytes of the stream to w and the hash, straight from
// the received chunks, through the rate limiter.
func (a *applier) copy(w io.Writer, size int64) error {
	for size > 0 {
		b, err := a.r.r.take(int(min(int64(a.maxWrite), size)))
		if err != nil {
			return unexpectedEOF(err)
		}
		if a.limiter != nil {
			if err := a.limiter.WaitN(a.ctx, len(b)); err != nil {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		_, _ = a.h.Write(b)
		size -= int64(len(b))
	}
	return nil
}

// manifestEntry reads a manifest record and checks it against the tree at
// once: nothing of it is kept but its path (for the order), so a peer's
// manifest costs no memory whatever its length (docs/live-transfers.md).
func (a *applier) manifestEntry(d *recDecoder) error {
	kind := d.byte()
	rel, mode, mtime := d.head()
	size := d.uvarint()
	if d.err != nil {
		return d.err
	}
	e := manEntry{kind: kind, mode: mode, mtime: mtime, size: int64(size)}
	switch kind {
	case 'd':
	case 'f':
		e.sum = d.sum()
	case 'l':
		e.target = d.str()
	default:
		return errBadStream
	}
	if d.err != nil {
		return d.err
	}
	if a.manCount > 0 && rel <= a.lastMan {
		return fmt.Errorf("%w: manifest path %s not after %s (a duplicate, or out of order)", errBadStream, shortPath(rel), shortPath(a.lastMan))
	}
	a.manCount++
	a.lastMan = rel
	return a.checkEntry(rel, &e)
}

// shortPath quotes rel for an error, cut to its first 200 bytes.
func shortPath(rel string) string {
	if len(rel) > 200 {
		return fmt.Sprintf("%q...", rel[:200])
	}
	return fmt.Sprintf("%q", rel)
}

// errNotReceived: the manifest names a path the stream did not write.
var errNotReceived = errors.New("the manifest names a path the stream did not write")

// checkEntry checks the path rel against its manifest entry e: kind,
// mode, time, link target, and a file's size and hash (taken when it
// arrived, in whichever pass). A directory gets its mode and time from
// the entry: nothing in it changes after its first manifest entry (no
// record but the manifest follows it; chmod and times of its children
// leave its own time alone).
func (a *applier) checkEntry(rel string, e *manEntry) error {
	d, base, err := a.enterParent(rel)
	var fi fs.FileInfo
	if err == nil {
		fi, err = d.Lstat(base)
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, sandbox.ErrNotDir) {
		return fmt.Errorf("%w: %w: %s", ErrManifestMismatch, errNotReceived, shortPath(rel))
	}
	if err != nil {
		if a.ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("%w: %s: %v", ErrManifestMismatch, shortPath(rel), err)
	}
	if kindOf(fi.Mode()) != e.kind {
		return fmt.Errorf("%w: %s is not of kind %c", ErrManifestMismatch, shortPath(rel), e.kind)
	}
	ok := true
	switch e.kind {
	case 'd':
		err = d.Chmod(base, e.mode)
		if err == nil {
			t := time.Unix(0, e.mtime)
			err = d.Lchtimes(base, t, t)
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrManifestMismatch, shortPath(rel), err)
		}
	case 'f':
		key := keyOf(rel)
		s, have := a.sums[key]
		delete(a.sums, key)
		sumOK := s.sum == e.sum && !s.seeded || s.seeded && e.sum == contentHash{}
		ok = have && s.size == e.size && sumOK && fi.Size() == e.size &&
			fi.Mode().Perm() == e.mode && fi.ModTime().UnixNano() == e.mtime
	case 'l':
		target, err := a.dst.Readlink(rel)
		ok = err == nil && target == e.target && fi.ModTime().UnixNano() == e.mtime
	}
	if !ok {
		return fmt.Errorf("%w: %s (want %c %o %d %d, have %o %d %d)", ErrManifestMismatch, shortPath(rel),
			e.kind, e.mode, e.mtime, e.size, fi.Mode().Perm(), fi.ModTime().UnixNano(), fi.Size())
	}
	return nil
}

// verify, at the end record, checks that the tree holds nothing but the
// manifest's paths: each of them was found as it arrived, and they are
// distinct (in strictly increasing order), so counting the tree's paths
// is enough.
func (a *applier) verify() error {
	defer func(began time.Time) { a.checked = time.Since(began) }(time.Now())
	var seen atomic.Int64
	err := a.dst.WalkParallel(a.ctx, ".", runtime.GOMAXPROCS(0), func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel != "." {
			seen.Add(1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n := uint64(seen.Load()); n != a.manCount {
		return fmt.Errorf("%w: the tree holds %d paths, the manifest names %d", ErrManifestMismatch, n, a.manCount)
	}
	return nil
}
