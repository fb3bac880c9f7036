package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
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
		maxWrite: 1 << 20, sums: map[string]fileSum{}, man: map[string]*manEntry{}, dirs: map[string]bool{},
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
	dirs     map[string]bool // directories known to exist
	log      func(pass uint64, phase byte)
	// noInstallLog: a version-2 stream, which has no install log record.
	noInstallLog bool
	installLog   []byte // the source's install log (not nil once received)

	// The directory of the last file written. It is let go before
	// anything that may remove it: a handle on a removed directory would
	// write where no path leads.
	held heldDir

	checked time.Duration // how long the check against the manifest took
}

// ErrManifestMismatch: after the final pass the target's tree is not the
// one the source's manifest describes.
var ErrManifestMismatch = fmt.Errorf("%w: the received tree does not match the source's manifest", ErrChecksumMismatch)

func (a *applier) run() error {
	defer a.held.close()
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
		a.held.close()
		if err := a.dst.RemoveAll(a.ctx, "."); err != nil {
			return err
		}
		clear(a.dirs)
		a.started = true
	}
	a.final = phase == phaseFinal
	a.log(pass, phase)
	return nil
}

// parents makes rel's parent directories, replacing a file or link in the
// way. Directories known to exist are not looked at again.
func (a *applier) parents(rel string) error {
	dir := path.Dir(rel)
	if dir == "." || a.dirs[dir] {
		return nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		if a.dirs[p] {
			continue
		}
		err := a.dst.Mkdir(p, 0o755)
		if errors.Is(err, fs.ErrExist) {
			fi, lerr := a.dst.Lstat(p)
			if lerr != nil {
				return lerr
			}
			if !fi.IsDir() {
				if err := a.remove(p); err != nil {
					return err
				}
				err = a.dst.Mkdir(p, 0o755)
			} else {
				err = nil
			}
		}
		if err != nil {
			return err
		}
		a.dirs[p] = true
	}
	return nil
}

// clear removes what is at rel unless it is of the wanted kind.
func (a *applier) clear(rel string, want byte) (existed bool, err error) {
	fi, err := a.dst.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if k := kindOf(fi.Mode()); k == want && want != 'l' {
		return true, nil
	}
	return false, a.remove(rel)
}

func (a *applier) remove(rel string) error {
	fi, err := a.dst.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, sandbox.ErrNotDir) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		a.held.close()
	}
	if err := a.dst.RemoveAll(a.ctx, rel); err != nil {
		return err
	}
	delete(a.sums, rel)
	if fi.IsDir() {
		for p := range a.sums {
			if strings.HasPrefix(p, rel+"/") {
				delete(a.sums, p)
			}
		}
		clear(a.dirs)
	}
	return nil
}

func (a *applier) dir(rel string, mode fs.FileMode, mtime int64) error {
	if a.dirs[rel] {
		return nil
	}
	if err := a.parents(rel); err != nil {
		return err
	}
	err := a.dst.Mkdir(rel, 0o755)
	if errors.Is(err, fs.ErrExist) {
		var existed bool
		if existed, err = a.clear(rel, 'd'); err == nil && !existed {
			err = a.dst.Mkdir(rel, 0o755)
		}
	}
	if err != nil {
		return err
	}
	a.dirs[rel] = true
	_ = a.dst.Chmod(rel, mode)
	return nil
}

func (a *applier) link(rel, target string, mtime int64) error {
	if err := a.parents(rel); err != nil {
		return err
	}
	if _, err := a.clear(rel, 'l'); err != nil {
		return err
	}
	if err := a.dst.Symlink(target, rel); err != nil {
		return err
	}
	t := time.Unix(0, mtime)
	_ = a.dst.Lchtimes(rel, t, t)
	return nil
}

func (a *applier) file(rel string, mode fs.FileMode, mtime, size int64) error {
	if err := a.parents(rel); err != nil {
		return err
	}
	delete(a.sums, rel)
	d, err := a.held.open(a.dst, path.Dir(rel))
	if err != nil {
		return err
	}
	base := path.Base(rel)
	// A new file is created exclusively; only something in the way is
	// looked at (a directory or link removed, a file truncated), by name.
	existed := false
	f, err := d.Create(base, mode)
	if errors.Is(err, fs.ErrExist) {
		d = nil // clear may remove a directory, and with it the open one
		if existed, err = a.clear(rel, 'f'); err != nil {
			return err
		}
		f, err = a.dst.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	}
	if err != nil {
		return err
	}
	a.h.Reset()
	err = a.copy(f, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && existed {
		err = a.dst.Chmod(rel, mode)
	}
	if err == nil {
		// In nanoseconds (a descriptor's SetTimes keeps microseconds).
		t := time.Unix(0, mtime)
		if d != nil {
			err = d.Lchtimes(base, t, t)
		} else {
			err = a.dst.Lchtimes(rel, t, t)
		}
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

// verify applies the directories' modes and times and checks the whole
// tree against the manifest: every path, kind, mode, time, link target, and
// every file's size and hash (the hash taken when the file arrived, in
// whichever pass that was).
func (a *applier) verify() error {
	defer func(began time.Time) { a.checked = time.Since(began) }(time.Now())
	for rel, e := range a.man {
		if e.kind == 'd' {
			t := time.Unix(0, e.mtime)
			if err := a.dst.Chmod(rel, e.mode); err != nil {
				return fmt.Errorf("%w: %s: %v", ErrManifestMismatch, rel, err)
			}
			_ = a.dst.Lchtimes(rel, t, t)
		}
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
