package transfer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptrace"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
)

// Tuning of the source of a live transfer.
const (
	// negotiateTimeout bounds the question to the target; no clear answer
	// in time means the classic transfer.
	negotiateTimeout = 5 * time.Second
	// maxOnlinePasses bounds the passes made while the server runs.
	maxOnlinePasses = 4
	// finalTarget is how long the final pass (the server stopped) should
	// take at most; more changes than that make another online pass.
	finalTarget = 2 * time.Second
	// minFinalBudget: a delta this small never needs another online pass.
	minFinalBudget = 16 << 20
	// racyWindow: a file modified this close to the moment it was read may
	// change again without its time stamp changing (coarse kernel clocks),
	// so it is sent again in the next pass whatever its stat says.
	racyWindow = time.Second
)

// negotiate asks the target whether it speaks live transfers and returns
// the newest version both sides speak. ok is false on any answer but a
// clear offer of a version this build speaks.
func (svc *Service) negotiate(ctx context.Context, url, token string) (o Offer, version int, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, negotiateTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Offer{}, 0, false
	}
	req.Header.Set("Authorization", token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set(LiveVersionHeader, fmt.Sprint(LiveVersion))
	res, err := svc.opts.Client.Do(req)
	if err != nil {
		return Offer{}, 0, false
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&o) != nil {
		return Offer{}, 0, false
	}
	version = chooseVersion(o)
	return o, version, version != 0
}

// chooseVersion is the newest version of the offer this build speaks, 0
// when none; never the version of transfers by manifest, which only a
// target sharing the repository gets (liveManifestRepo).
func chooseVersion(o Offer) int {
	best := 0
	for _, v := range o.Versions {
		if o.Protocol == LiveProtocol && SpeaksLive(v) && v != liveManifestVersion {
			best = max(best, v)
		}
	}
	return best
}

// compressionFor picks the stream's compression from the configuration
// and what the target offers.
func compressionFor(configured string, o Offer) string {
	zstdOK := slices.Contains(o.Compression, "zstd")
	switch {
	case configured == "none" || !zstdOK:
		return "none"
	case configured == "zstd":
		return "zstd"
	}
	return "auto"
}

// liveEntry is what the source sent of one path (and what it knew of it).
type liveEntry struct {
	kind   byte // 'd', 'f' or 'l'
	mode   fs.FileMode
	mtime  int64 // ns
	ctime  int64 // ns
	ino    uint64
	size   int64
	sum    contentHash
	target string
	racy   bool
}

// scanned is one path of a scan of the tree.
type scanned struct {
	rel  string
	kind byte
	fi   fs.FileInfo
}

// liveSender streams a server's tree in passes.
type liveSender struct {
	ctx   context.Context
	src   *sandbox.FS
	rw    *recWriter
	cw    *chunkWriter
	index map[string]*liveEntry
	h     *xxh3.Hasher128
	// The directory of the last file read. A directory the running server
	// renames meanwhile is read at its new place under the old name:
	// harmless, as what was read is recorded by the opened file's own
	// stat, which the next pass compares.
	held heldDir
	// installLog is the path of the server's install log, sent before the
	// manifest when set (wire version 3 on).
	installLog string
	// firsts (wire version 4 on; nil before) maps each file with several
	// names to the first name this pass sent it under: its later names go
	// as hard link records. It is emptied at every pass.
	firsts map[fileID]string
	sent   atomic.Int64 // file bytes sent
	// snap (version 5) is the transfer snapshot the stream names, whose
	// seeded files (seeded bytes) are in the index before the first pass.
	snap     *liveSnapshot
	seeded   atomic.Int64
	restored <-chan struct{} // closed when the target restored snap
	sparse   atomic.Int64    // files sent as data extents
	links    atomic.Int64    // hard link records sent
	pass     atomic.Int64
	phase    atomic.Int64
}

// newLiveSender is the sender of src's tree in wire version version, with
// the install log at installLog from version 3 on.
func newLiveSender(ctx context.Context, src *sandbox.FS, version int, installLog string) *liveSender {
	ls := &liveSender{ctx: ctx, src: src, index: map[string]*liveEntry{}, h: newContentHash()}
	if version >= 3 {
		ls.installLog = installLog
	}
	if version >= 4 {
		ls.firsts = map[fileID]string{}
	}
	return ls
}

func statTimes(fi fs.FileInfo) (ctime int64, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ctim.Nano(), st.Ino
	}
	return 0, 0
}

func kindOf(m fs.FileMode) byte {
	switch {
	case m.IsDir():
		return 'd'
	case m.IsRegular():
		return 'f'
	case m&fs.ModeSymlink != 0:
		return 'l'
	}
	return 0
}

// treeEntry filters a walk of the tree: the root itself and entries that
// vanished during the walk are skipped (ok false); any other error (a
// part of the tree that could not be read, or the root) ends the walk, and
// the transfer fails rather than leave that part behind; so does a name
// longer than the wire carries (a tree thousands of levels deep).
func treeEntry(rel string, err error) (ok bool, _ error) {
	if err != nil {
		if rel == "." || !sandbox.Vanished(err) {
			return false, err
		}
		return false, nil // vanished during the walk
	}
	if len(rel) > maxNameLen {
		// The target would refuse the stream as invalid: say why, here.
		return false, fmt.Errorf("%s: a name of %d bytes, a live transfer carries names of at most %d",
			sandbox.ShortPath("/"+rel), len(rel), maxNameLen)
	}
	return rel != ".", nil
}

// scan lists the tree (lstat only), sorted by path (a directory before
// its entries), listing directories on every core.
func (ls *liveSender) scan() ([]scanned, error) {
	var mu sync.Mutex
	var out []scanned
	err := ls.src.WalkParallel(ls.ctx, ".", runtime.GOMAXPROCS(0), func(rel string, d fs.DirEntry, err error) error {
		if ok, err := treeEntry(rel, err); !ok {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if k := kindOf(fi.Mode()); k != 0 {
			mu.Lock()
			out = append(out, scanned{rel: rel, kind: k, fi: fi})
			mu.Unlock()
		}
		return nil
	})
	slices.SortFunc(out, func(a, b scanned) int { return strings.Compare(a.rel, b.rel) })
	return out, err
}

// unchanged reports whether the file at s is what was sent.
func (ls *liveSender) unchanged(s scanned) bool {
	prev := ls.index[s.rel]
	if prev == nil || prev.kind != s.kind {
		return false
	}
	mtime := s.fi.ModTime().UnixNano()
	switch s.kind {
	case 'f':
		ctime, ino := statTimes(s.fi)
		return !prev.racy && prev.size == s.fi.Size() && prev.mtime == mtime && prev.ctime == ctime && prev.ino == ino && prev.mode == s.fi.Mode().Perm()
	case 'l':
		return prev.mtime == mtime
	}
	return true // directories: created once, metadata in the manifest
}

// pending sums the file bytes a pass over the scan would send: from wire
// version 4 on, a file with holes counts what it allocates and a file with
// several names counts once.
func (ls *liveSender) pending(tree []scanned) int64 {
	var n int64
	var seen map[fileID]bool
	for _, s := range tree {
		if s.kind != 'f' || ls.unchanged(s) {
			continue
		}
		if ls.firsts == nil {
			n += s.fi.Size()
			continue
		}
		if id, ok := multiName(s.fi); ok {
			if seen == nil {
				seen = map[fileID]bool{}
			}
			if seen[id] {
				continue
			}
			seen[id] = true
		}
		n += dataSize(s.fi)
	}
	return n
}

// send makes one pass: deletions first, then what is new or changed.
func (ls *liveSender) send(tree []scanned, pass int, phase byte) error {
	defer ls.held.close() // directories may go between passes
	if err := ls.beginPass(pass, phase); err != nil {
		return err
	}
	now := make(map[string]byte, len(tree))
	for _, s := range tree {
		now[s.rel] = s.kind
	}
	var gone []string
	for rel, e := range ls.index {
		if k, ok := now[rel]; !ok || k != e.kind {
			gone = append(gone, rel)
		}
	}
	slices.Sort(gone)
	var last string
	for _, rel := range gone {
		delete(ls.index, rel)
		if last != "" && strings.HasPrefix(rel, last+"/") {
			continue // removed with its directory
		}
		last = rel
		if err := ls.remove(rel); err != nil {
			return err
		}
	}
	for _, s := range tree {
		if err := ls.ctx.Err(); err != nil {
			return context.Cause(ls.ctx)
		}
		if ls.unchanged(s) {
			if s.kind == 'd' {
				e := ls.index[s.rel]
				e.mode, e.mtime = s.fi.Mode().Perm(), s.fi.ModTime().UnixNano()
			}
			continue
		}
		var err error
		switch s.kind {
		case 'd':
			err = ls.dir(s)
		case 'l':
			err = ls.link(s)
		case 'f':
			err = ls.file(s, phase == phaseFinal)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (ls *liveSender) beginPass(pass int, phase byte) error {
	ls.pass.Store(int64(pass))
	ls.phase.Store(int64(phase))
	if ls.firsts != nil {
		clear(ls.firsts)
	}
	ls.rw.begin(recPass)
	ls.rw.uvarint(uint64(pass))
	ls.rw.bytes([]byte{phase})
	return ls.rw.flush()
}

// sendAll makes the first pass: nothing was sent yet, so everything is
// sent as the walk finds it (no scan first, and a file is stat'ed once,
// when opened).
func (ls *liveSender) sendAll(pass int) error {
	defer ls.held.close()
	if err := ls.beginPass(pass, phaseOnline); err != nil {
		return err
	}
	return ls.src.WalkContext(ls.ctx, ".", func(rel string, d fs.DirEntry, err error) error {
		if ok, err := treeEntry(rel, err); !ok {
			return err
		}
		if d.Type().IsRegular() {
			return ls.file(scanned{rel: rel, kind: 'f'}, false)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch s := (scanned{rel: rel, kind: kindOf(fi.Mode()), fi: fi}); s.kind {
		case 'd':
			return ls.dir(s)
		case 'l':
			return ls.link(s)
		}
		return nil
	})
}

func (ls *liveSender) remove(rel string) error {
	ls.rw.begin(recDelete)
	ls.rw.str(rel)
	return ls.rw.flush()
}

func (ls *liveSender) dir(s scanned) error {
	e := &liveEntry{kind: 'd', mode: s.fi.Mode().Perm(), mtime: s.fi.ModTime().UnixNano()}
	ls.index[s.rel] = e
	ls.rw.begin(recDir)
	ls.rw.str(s.rel)
	ls.rw.uvarint(uint64(e.mode))
	ls.rw.varint(e.mtime)
	return ls.rw.flush()
}

func (ls *liveSender) link(s scanned) error {
	target, err := ls.src.Readlink(s.rel)
	if err != nil && !sandbox.Vanished(err) {
		return err
	}
	if err != nil || target == "" {
		return ls.vanished(s.rel)
	}
	e := &liveEntry{kind: 'l', mode: s.fi.Mode().Perm(), mtime: s.fi.ModTime().UnixNano(), target: target}
	ls.index[s.rel] = e
	ls.rw.begin(recLink)
	ls.rw.str(s.rel)
	ls.rw.str(target)
	ls.rw.varint(e.mtime)
	return ls.rw.flush()
}

// unreadable is vanished for a path that disappeared (sandbox.Vanished)
// and err, which ends the transfer, for one that could not be read.
func (ls *liveSender) unreadable(rel string, err error) error {
	if sandbox.Vanished(err) {
		return ls.vanished(rel)
	}
	return err
}

// vanished forgets a path that disappeared between the scan and its read.
func (ls *liveSender) vanished(rel string) error {
	if _, ok := ls.index[rel]; !ok {
		return nil
	}
	delete(ls.index, rel)
	return ls.remove(rel)
}

// file sends a regular file with the size it had when opened (cut, or
// padded with zeros: a file the running server changes while it is read is
// sent again by a later pass, its stat having changed).
func (ls *liveSender) file(s scanned, final bool) error {
	started := time.Now()
	d, err := ls.held.open(ls.src, path.Dir(s.rel))
	if err != nil {
		return ls.unreadable(s.rel, err)
	}
	f, err := d.Open(path.Base(s.rel))
	if err != nil {
		return ls.unreadable(s.rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return ls.vanished(s.rel)
	}
	if done, err := ls.sendHardLink(s.rel, fi); done || err != nil {
		return err
	}
	ctime, ino := statTimes(fi)
	e := &liveEntry{kind: 'f', mode: fi.Mode().Perm(), mtime: fi.ModTime().UnixNano(), ctime: ctime, ino: ino, size: fi.Size()}
	sparse := false
	if ls.firsts != nil && holey(fi) { // version 4: holes stay holes
		if sparse, err = ls.sendSparse(s.rel, f, e); err != nil {
			return err
		}
	}
	if !sparse {
		ls.rw.begin(recFile)
		ls.rw.str(s.rel)
		ls.rw.uvarint(uint64(e.mode))
		ls.rw.varint(e.mtime)
		ls.rw.uvarint(uint64(e.size))
		if err := ls.rw.flush(); err != nil {
			return err
		}
		ls.h.Reset()
		if err := ls.copyFile(f, e.size); err != nil {
			return err
		}
		ls.sent.Add(e.size)
	}
	e.sum = ls.h.Sum128().Bytes()
	ls.rw.scratch = append(ls.rw.scratch[:0], e.sum[:]...)
	if err := ls.rw.flush(); err != nil {
		return err
	}
	if !final {
		after, serr := f.Stat()
		edge := started.Add(-racyWindow).UnixNano()
		e.racy = serr != nil || after.ModTime().UnixNano() != e.mtime || after.Size() != e.size || e.mtime >= edge || e.ctime >= edge
	}
	ls.index[s.rel] = e
	ls.rememberFirst(s.rel, fi)
	return nil
}

// sendInstallLog sends the end of the server's install log, when it has
// one that can be read (a missing log is not sent: a server installed
// elsewhere, or never; an unreadable one does not fail the transfer, as in
// the classic transfer's target).
func (ls *liveSender) sendInstallLog() error {
	if ls.installLog == "" {
		return nil
	}
	data, err := readFileTail(ls.installLog, maxInstallLog)
	if err != nil {
		return nil
	}
	ls.rw.begin(recInstallLog)
	ls.rw.uvarint(uint64(len(data)))
	if err := ls.rw.flush(); err != nil {
		return err
	}
	_, err = ls.cw.Write(data)
	return err
}

// readFileTail returns at most the last limit bytes of the file at p.
func readFileTail(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > limit {
		if _, err := f.Seek(fi.Size()-limit, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// manifest lists the whole tree as sent, then ends the stream.
func (ls *liveSender) manifest() error {
	paths := make([]string, 0, len(ls.index))
	for rel := range ls.index {
		paths = append(paths, rel)
	}
	slices.Sort(paths)
	for _, rel := range paths {
		e := ls.index[rel]
		ls.rw.begin(recManifest)
		ls.rw.bytes([]byte{e.kind})
		ls.rw.str(rel)
		ls.rw.uvarint(uint64(e.mode))
		ls.rw.varint(e.mtime)
		ls.rw.uvarint(uint64(e.size))
		switch e.kind {
		case 'f':
			ls.rw.bytes(e.sum[:])
		case 'l':
			ls.rw.str(e.target)
		}
		if err := ls.rw.flush(); err != nil {
			return err
		}
	}
	ls.rw.begin(recEnd)
	ls.rw.uvarint(uint64(len(paths)))
	return ls.rw.flush()
}

// liveRun is the state of one outgoing live transfer shared with its
// owner: whether and when the server was stopped.
type liveRun struct {
	sentAll   atomic.Bool // the end record was written
	stopped   atomic.Bool
	stoppedAt atomic.Int64 // unix ns
}

// streamLive runs the passes and the final phase over one POST to the
// target.
func (svc *Service) streamLive(t *Transfer, s *server.Server, url, token string, version int, compression string, run *liveRun, tl transferLog) error {
	ctx := t.ctx
	total := s.Utilization().DiskBytes
	if total <= 0 {
		if n, err := s.Files().RefreshUsage(ctx); err == nil {
			total = n
		}
	}
	// The passes end as soon as the target answers (it only answers early
	// to refuse): never stop the server for a transfer that is over.
	passCtx, passCancel := context.WithCancelCause(ctx)
	defer passCancel(nil)
	client, link := svc.liveClient()
	defer client.CloseIdleConnections()
	ls := newLiveSender(passCtx, t.job.FS().Trusted(), version, installLogPath(svc.opts.Config.Get().System.LogDirectory, s.UUID()))
	reqCtx := ctx
	if version == liveManifestVersion {
		repo, ok := svc.opts.Backups.SharedRepositoryID(ctx)
		if !ok {
			return errors.New("the shared backup repository cannot be read")
		}
		snap, err := svc.writeLiveSnapshot(passCtx, s, ls, repo, tl)
		defer svc.deleteLiveSnapshot(t.server, snap)
		if err != nil {
			return err
		}
		ls.snap = snap
		var trace *httptrace.ClientTrace
		trace, ls.restored = restoredTrace()
		reqCtx = httptrace.WithClientTrace(ctx, trace)
	}
	cw, err := newChunkWriter(compression, link)
	if err != nil {
		return err
	}
	ls.rw, ls.cw = &recWriter{w: cw}, cw
	defer svc.everyProgressInterval(func() {
		done := ls.sent.Load() + ls.seeded.Load()
		tl.msg("Uploading " + progressBar(done, max(total, done)) + phaseNote(ls.pass.Load(), ls.phase.Load()))
	})()

	done := make(chan error, 1)
	go func() {
		err := svc.livePasses(ls, s, run, tl)
		if err != nil {
			cw.abort(err) // the body ends in an error, never cleanly
		}
		if cerr := cw.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			run.sentAll.Store(true)
		}
		done <- err
	}()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, url, cw.body())
	if err != nil {
		cw.abort(err)
		_ = cw.CloseBody()
		<-done
		return err
	}
	req.Header.Set("Authorization", token)
	req.Header.Set("Content-Type", LiveContentType)
	req.Header.Set(LiveVersionHeader, fmt.Sprint(version))
	res, err := client.Do(req)
	passCancel(errAnswered)
	if err != nil {
		cw.abort(err)
		_ = cw.CloseBody()
		if werr := <-done; werr != nil && !errors.Is(werr, errBodyClosed) && !errors.Is(werr, errAnswered) && ctx.Err() == nil && !errors.Is(werr, err) {
			return fmt.Errorf("%w (while writing the stream: %v)", err, werr)
		}
		return err
	}
	defer res.Body.Close()
	cw.abort(errAnswered)
	_ = cw.CloseBody()
	werr := <-done
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode != http.StatusOK {
		return &StatusError{Code: res.StatusCode}
	}
	if werr == nil {
		tl.msg("Uploading " + progressBar(ls.sent.Load(), max(total, ls.sent.Load())) + phaseNote(ls.pass.Load(), ls.phase.Load()))
		svc.opts.Log.Info("live transfer streamed", "server", t.server, "passes", ls.pass.Load(),
			"file_bytes", ls.sent.Load(), "sparse_files", ls.sparse.Load(), "hard_links", ls.links.Load(), "wire_bytes", cw.sent.Load(), "chunks", cw.chunks.Load(), "zstd_chunks", cw.zchunks.Load())
	}
	return werr
}

func phaseNote(pass, phase int64) string {
	switch phase {
	case phaseOnline:
		return fmt.Sprintf(" (phase 1, pass %d: the server is online)", pass)
	case phaseFinal:
		return " (phase 2: the server is stopped, sending the last changes)"
	}
	return ""
}

// livePasses writes the stream: online passes while the changes are large,
// then the stop, the final pass and the manifest.
func (svc *Service) livePasses(ls *liveSender, s *server.Server, run *liveRun, tl transferLog) error {
	var tree []scanned
	var err error
	for pass := 1; ; pass++ {
		began := time.Now()
		before := ls.sent.Load()
		// Each pass says when it begins: a short pass may end before the
		// first progress tick.
		tl.msg("Sending the files" + phaseNote(int64(pass), phaseOnline) + "...")
		switch {
		case pass == 1 && ls.snap != nil:
			// The target holds the seeded files once it has the
			// snapshot: the first pass sends what the index lacks.
			if err = ls.sendSnapshot(); err == nil {
				if tree, err = ls.scan(); err == nil {
					err = ls.send(tree, pass, phaseOnline)
				}
			}
			if err == nil {
				err = svc.waitRestored(ls, tl)
			}
		case pass == 1:
			err = ls.sendAll(pass)
		default:
			err = ls.send(tree, pass, phaseOnline)
		}
		if err != nil {
			return err
		}
		rate := float64(ls.sent.Load()-before) / max(time.Since(began).Seconds(), 0.001)
		if tree, err = ls.scan(); err != nil {
			return err
		}
		left := ls.pending(tree)
		budget := max(int64(rate*finalTarget.Seconds()), minFinalBudget)
		svc.opts.Log.Info("live transfer pass done", "server", s.UUID(), "pass", pass, "changed_bytes", left, "budget", budget)
		if left <= budget || pass >= maxOnlinePasses {
			break
		}
		tl.msg(fmt.Sprintf("Pass %d done; %s changed meanwhile: sending the changes while the server stays online.", pass, humanBytes(left)))
	}
	// Whatever the target answered meanwhile ends the transfer here, with
	// the server still running.
	if err := ls.cw.broken(); err != nil {
		return err
	}
	if err := ls.ctx.Err(); err != nil {
		return context.Cause(ls.ctx)
	}
	tl.msg("Stopping the server to send the last changes...")
	// A stop once begun runs to its end (StopWait bounds it), whatever
	// happens to the transfer meanwhile: a failure then finds the server
	// stopped, never half-way, and starts it again.
	run.stopped.Store(true)
	if err := s.StopForJob(context.WithoutCancel(ls.ctx), svc.opts.StopWait); err != nil {
		return err
	}
	run.stoppedAt.Store(time.Now().UnixNano())
	svc.opts.Log.Info("live transfer: the server is stopped, sending the last changes", "server", s.UUID())
	// As in the classic transfer: the stopped container is not needed (a
	// start re-creates it) and would hold the name the target's needs on
	// a shared engine.
	if rerr := svc.opts.Servers.RemoveContainer(ls.ctx, s.UUID()); rerr != nil {
		svc.opts.Log.Warn("could not remove the stopped container before sending", "server", s.UUID(), "error", rerr)
	}
	if tree, err = ls.scan(); err != nil {
		return err
	}
	if err := ls.send(tree, int(ls.pass.Load())+1, phaseFinal); err != nil {
		return err
	}
	if err := ls.sendInstallLog(); err != nil {
		return err
	}
	return ls.manifest()
}

// runLive is runOutgoing for a target that speaks live transfers: it
// reports whether the transfer completed; end releases the job slot.
func (svc *Service) runLive(t *Transfer, s *server.Server, url, token string, offer Offer, version int, tl transferLog, end func()) bool {
	log := svc.opts.Log.With("server", t.server, "direction", "outgoing")
	compression := compressionFor(svc.opts.Config.Get().System.Transfers.Compression, offer)
	wasRunning := s.State() != server.Offline
	log.Info("the target speaks live transfers", "version", version, "compression", compression)
	run := &liveRun{}
	var err error
	if !t.setStatus(Processing) {
		err = context.Cause(t.ctx)
	}
	if err == nil {
		tl.msg("Streaming archive to destination... (live transfer: the server stays online while its files are copied)")
		err = svc.streamLive(t, s, url, token, version, compression, run, tl)
	}
	if t.ctx.Err() != nil && err != nil {
		err = context.Cause(t.ctx)
	}
	if err != nil {
		status, rerr := svc.endOutgoing(t, err, end, tl, log, "stopped", run.stopped.Load())
		if status == Completed {
			return false
		}
		// Once the whole stream is out, the target may have registered the
		// server (and told the backend) before the connection broke:
		// starting it here too would run it twice. The target did not
		// succeed when it answered an error, when this side cancelled, or
		// when the backend accepted this failure (the panels refuse it once
		// the transfer has ended). Otherwise the server stays stopped, as
		// after a failed classic transfer.
		var serr *StatusError
		certain := !run.sentAll.Load() || errors.As(err, &serr) || errors.Is(err, ErrCancelled) || rerr == nil
		if run.stopped.Load() && wasRunning && certain {
			svc.restartAfterFailure(s, tl, log)
		}
		return false
	}
	offline := time.Duration(time.Now().UnixNano() - run.stoppedAt.Load())
	svc.endOutgoing(t, nil, end, tl, log, "live", true, "offline", offline.Round(time.Millisecond).String(), "offline_ms", offline.Milliseconds())
	return true
}

// restartAfterFailure starts again a server that a failed live transfer
// stopped.
func (svc *Service) restartAfterFailure(s *server.Server, tl transferLog, log interface {
	Info(string, ...any)
	Warn(string, ...any)
}) {
	const msg = "The transfer failed after the server was stopped: starting the server again on this node."
	tl.msg(msg)
	s.DaemonMessage(msg)
	if err := s.Power(svc.ctx, server.PowerStart, svc.opts.StopWait); err != nil {
		log.Warn("could not start the server again after a failed transfer", "error", err)
		return
	}
	log.Info("server started again after a failed live transfer")
}

// copyFile sends exactly size bytes of f, read straight into the chunks
// and hashed there: a read error or an early end (the file shrank) is
// padded with zeros; only a broken stream is an error.
func (ls *liveSender) copyFile(f io.Reader, size int64) error {
	readable := true
	for size > 0 {
		room, err := ls.cw.room()
		if err != nil {
			return err
		}
		p := room[:min(int64(len(room)), size)]
		n := 0
		if readable {
			n, err = io.ReadFull(f, p)
			if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
				return err // not a file that shrank: one that cannot be read
			}
			readable = err == nil
		}
		if !readable {
			clear(p[n:])
			n = len(p)
		}
		_, _ = ls.h.Write(p[:n])
		ls.cw.fill(n)
		size -= int64(n)
	}
	return nil
}

// LiveEnabled reports whether this node speaks live transfers
// (system.transfers.live).
func (svc *Service) LiveEnabled() bool { return svc.opts.Config.Get().System.Transfers.Live }
