package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"strings"
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
// stream's wire version (SpeaksLive).
func (svc *Service) ReceiveLive(ctx context.Context, id string, version int, body io.Reader, unblock func()) error {
	return svc.receiveWith(ctx, id, unblock, func(t *Transfer, s *server.Server) error {
		return svc.fillLive(t, s, version, body)
	})
}

func (svc *Service) fillLive(t *Transfer, s *server.Server, version int, body io.Reader) error {
	cfg := svc.opts.Config.Get()
	cr, err := newChunkReader(ctxReader{t.ctx, body})
	if err != nil {
		return err
	}
	defer cr.Close()
	a := &applier{
		ctx: t.ctx, dst: s.Files().Trusted(), r: recReader{cr}, h: newContentHash(),
		maxWrite: 1 << 20, sums: map[string]fileSum{}, man: map[string]*manEntry{},
		noInstallLog: version < 3,
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
		"paths", len(a.man), "check", a.checked.Round(time.Millisecond).String())
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
}

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
	sums     map[string]fileSum
	man      map[string]*manEntry
	final    bool
	started  bool
	log      func(pass uint64, phase byte)
	// noInstallLog: a version-2 stream, which has no install log record.
	noInstallLog bool
	installLog   []byte // the source's install log (not nil once received)

	// The open directories down to the last record's (made on first
	// use): each record is applied by one name in its parent, reached
	// from the previous record's, so a deep tree costs linear time and a
	// directory swapped for a link mid-transfer is never followed.
	stack *sandbox.DirStack

	checked time.Duration // how long the check against the manifest took
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
	if a.final && kind != recManifest && kind != recEnd && len(a.man) > 0 {
		return errBadStream // only manifest records follow the first one
	}
	d := &recDecoder{r: a.r}
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
		if size > 1<<50 {
			return errBadStream
		}
		return a.file(rel, mode, mtime, int64(size))
	case recLink:
		rel, target, mtime := d.name(), d.str(), d.varint()
		if d.err != nil {
			return d.err
		}
		return a.link(rel, target, mtime)
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
		if !a.final || n != uint64(len(a.man)) {
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
	if !a.started {
		// The server is new on this node: whatever its directory holds
		// (left by an earlier failed attempt) is not the source's.
		if a.stack != nil {
			a.stack.Leave(".")
		}
		if err := a.dst.RemoveAll(a.ctx, "."); err != nil {
			return err
		}
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
		st.Removed = func(rel string) { delete(a.sums, rel) }
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
	if k := kindOf(fi.Mode()); k == want && want != 'l' {
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
		delete(a.sums, rel)
		return nil
	}
	// No handle below rel may outlive it: it would write where no path
	// leads. (d, rel's parent, is the stack's top and stays open.)
	a.stack.Leave(rel)
	if err := d.RemoveAll(a.ctx, base); err != nil {
		return err
	}
	delete(a.sums, rel)
	for p := range a.sums {
		if strings.HasPrefix(p, rel+"/") {
			delete(a.sums, p)
		}
	}
	return nil
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
	d, base, err := a.parent(rel)
	if err != nil {
		return err
	}
	delete(a.sums, rel)
	f, existed, err := a.create(d, rel, base, mode)
	if err != nil {
		return err
	}
	a.h.Reset()
	err = a.copy(f, size)
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
	a.sums[rel] = fileSum{size: size, sum: want}
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

func (a *applier) manifestEntry(d *recDecoder) error {
	kind := d.byte()
	rel, mode, mtime := d.head()
	size := d.uvarint()
	if d.err != nil {
		return d.err
	}
	e := &manEntry{kind: kind, mode: mode, mtime: mtime, size: int64(size)}
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
	if _, dup := a.man[rel]; dup {
		return errBadStream
	}
	a.man[rel] = e
	return nil
}

// dirMeta applies the manifest's directory modes and times, a directory's
// children before it (names in reverse order), each through the directory
// stack from its parent: consecutive names share most of their path, so
// a deep tree costs linear time.
func (a *applier) dirMeta() error {
	var dirs []string
	for rel, e := range a.man {
		if e.kind == 'd' {
			dirs = append(dirs, rel)
		}
	}
	slices.Sort(dirs)
	for _, rel := range slices.Backward(dirs) {
		e := a.man[rel]
		d, base, err := a.enterParent(rel)
		if err == nil {
			err = d.Chmod(base, e.mode)
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrManifestMismatch, rel, err)
		}
		t := time.Unix(0, e.mtime)
		_ = d.Lchtimes(base, t, t)
	}
	return nil
}

// verify applies the directories' modes and times and checks the whole
// tree against the manifest: every path, kind, mode, time, link target, and
// every file's size and hash (the hash taken when the file arrived, in
// whichever pass that was).
func (a *applier) verify() error {
	defer func(began time.Time) { a.checked = time.Since(began) }(time.Now())
	if err := a.dirMeta(); err != nil {
		return err
	}
	var seen atomic.Int64
	err := a.dst.WalkParallel(a.ctx, ".", runtime.GOMAXPROCS(0), func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		e := a.man[rel]
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if e == nil || kindOf(fi.Mode()) != e.kind {
			return fmt.Errorf("%w: %s", ErrManifestMismatch, rel)
		}
		seen.Add(1)
		ok := true
		switch e.kind {
		case 'd':
			ok = fi.Mode().Perm() == e.mode && fi.ModTime().UnixNano() == e.mtime
		case 'f':
			s, have := a.sums[rel]
			ok = have && s.size == e.size && s.sum == e.sum && fi.Size() == e.size &&
				fi.Mode().Perm() == e.mode && fi.ModTime().UnixNano() == e.mtime
		case 'l':
			target, err := a.dst.Readlink(rel)
			ok = err == nil && target == e.target && fi.ModTime().UnixNano() == e.mtime
		}
		if !ok {
			s := a.sums[rel]
			return fmt.Errorf("%w: %s (want %c %o %d %d, have %o %d %d, received %d)", ErrManifestMismatch, rel,
				e.kind, e.mode, e.mtime, e.size, fi.Mode().Perm(), fi.ModTime().UnixNano(), fi.Size(), s.size)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n := int(seen.Load()); n != len(a.man) {
		return fmt.Errorf("%w: %d paths missing", ErrManifestMismatch, len(a.man)-n)
	}
	return nil
}
