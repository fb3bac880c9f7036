package transfer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
)

// Live transfers by manifest (issue 36, docs/live-transfers.md "Version
// 5: the bulk through the shared repository"). When the source and the
// target share the backup repository and the target speaks wire version
// 5, the source stores the running server as a transfer snapshot of the
// repository (only the chunks the bucket lacks are uploaded), then opens
// the live stream with a snapshot record naming it and a seed record for
// every file the snapshot holds exactly as it is on disk. The target
// extracts the snapshot from the bucket (every chunk checked against its
// hash), keeps the seeded files (given the source's mode and time) and
// removes everything else the snapshot held; the passes that follow send
// only what is not seeded or changed since, the final one with the server
// stopped, and the manifest checks the whole tree as today. The source
// deletes the snapshot once the target answered, whatever the answer.

// liveManifestVersion is the wire version of live transfers by manifest.
// A source sends it only to a target that offers it and names the
// source's shared repository; any other target gets the newest of the
// other versions (chooseVersion).
const liveManifestVersion = 5

// Records of version 5, before the first pass record only.
const (
	recSnapshot = 'R' // repository id, snapshot name
	recSeed     = 'K' // path, mode, mtime, size: a file the snapshot holds
)

// liveSnapshot is the transfer snapshot a version-5 stream names.
type liveSnapshot struct {
	repo, name string
	seeds      []string // the seeded files, sorted
}

// liveManifestRepo reports whether a live transfer to the target that
// made offer goes by manifest, and the shared repository's id.
func (svc *Service) liveManifestRepo(ctx context.Context, o Offer) (string, bool) {
	if svc.opts.Backups == nil || o.Protocol != LiveProtocol || o.Repository == "" ||
		!slices.Contains(o.Versions, liveManifestVersion) {
		return "", false
	}
	mine, ok := svc.opts.Backups.SharedRepositoryID(ctx)
	return mine, ok && mine == o.Repository
}

// writeLiveSnapshot stores the running server as a transfer snapshot and
// seeds ls's index with the files it holds as they are on disk (those
// that may change again without their stat changing are left out, and go
// by the stream). The caller deletes the snapshot (deleteLiveSnapshot)
// once the target answered, or when this fails after the name is set.
func (svc *Service) writeLiveSnapshot(ctx context.Context, s *server.Server, ls *liveSender, repo string, tl transferLog) (*liveSnapshot, error) {
	snap := &liveSnapshot{repo: repo, name: "transfer-" + uuid.NewString()}
	tl.msg("Storing the server in the shared backup repository while it runs...")
	// A file modified this close to the start may be changed again without
	// its stat changing: the stream sends it.
	edge := time.Now().Add(-racyWindow).UnixNano()
	var mu sync.Mutex
	seen := map[string]*liveEntry{}
	began := time.Now()
	_, err := svc.opts.Backups.WriteLiveTransferSnapshot(ctx, s.UUID(), ls.src, snap.name, func(rel string, fi fs.FileInfo) {
		ctime, ino := statTimes(fi)
		if !fi.Mode().IsRegular() || fi.Size() == 0 || nlink(fi) > 1 ||
			fi.ModTime().UnixNano() >= edge || ctime >= edge || len(rel) > maxNameLen {
			return
		}
		e := &liveEntry{kind: 'f', mode: fi.Mode().Perm(), mtime: fi.ModTime().UnixNano(), ctime: ctime, ino: ino, size: fi.Size()}
		mu.Lock()
		seen[rel] = e
		mu.Unlock()
	})
	if err != nil {
		return snap, err
	}
	// As the stopped transfer by manifest: never name a snapshot another
	// node may have collected while this node's lease had lapsed.
	if err := svc.opts.Backups.TransferSnapshotValid(s.UUID(), snap.name); err != nil {
		return snap, err
	}
	snap.seeds = make([]string, 0, len(seen))
	var bytes int64
	for rel, e := range seen {
		ls.index[rel] = e
		snap.seeds = append(snap.seeds, rel)
		bytes += e.size
	}
	slices.Sort(snap.seeds)
	ls.seeded.Store(bytes)
	svc.opts.Log.Info("live transfer snapshot stored", "server", s.UUID(), "snapshot", snap.name,
		"seeded_files", len(snap.seeds), "seeded_bytes", bytes, "duration", time.Since(began).Round(time.Millisecond).String())
	return snap, nil
}

// deleteLiveSnapshot removes the transfer snapshot (its chunks stay as
// long as another backup names them).
func (svc *Service) deleteLiveSnapshot(server string, snap *liveSnapshot) {
	if err := svc.opts.Backups.DeleteTransferSnapshot(server, snap.name); err != nil {
		svc.opts.Log.Warn("deleting the transfer snapshot", "server", server, "snapshot", snap.name, "error", err)
	}
}

// sendSnapshot writes the snapshot record and a seed record per seeded
// file, as the index holds it. The seeds' directories, which the target
// keeps, join the index (their mode and time are the next scan's): one
// the server removes meanwhile is then removed on the target too.
func (ls *liveSender) sendSnapshot() error {
	for _, rel := range ls.snap.seeds {
		for p := path.Dir(rel); p != "." && ls.index[p] == nil; p = path.Dir(p) {
			ls.index[p] = &liveEntry{kind: 'd'}
		}
	}
	ls.rw.begin(recSnapshot)
	ls.rw.str(ls.snap.repo)
	ls.rw.str(ls.snap.name)
	if err := ls.rw.flush(); err != nil {
		return err
	}
	for _, rel := range ls.snap.seeds {
		if err := ls.ctx.Err(); err != nil {
			return context.Cause(ls.ctx)
		}
		e := ls.index[rel]
		ls.rw.begin(recSeed)
		ls.rw.str(rel)
		ls.rw.uvarint(uint64(e.mode))
		ls.rw.varint(e.mtime)
		ls.rw.uvarint(uint64(e.size))
		if err := ls.rw.flush(); err != nil {
			return err
		}
	}
	return nil
}

// liveRestorer is the target's restore of a version-5 stream's snapshot
// into the incoming server's directory; nil without a repository.
func (svc *Service) liveRestorer(id string, dst *sandbox.FS) func(ctx context.Context, repo, name string) error {
	if svc.opts.Backups == nil {
		return nil
	}
	return func(ctx context.Context, repo, name string) error {
		cfg := svc.opts.Config.Get()
		opts := archive.ExtractOptions{
			WriteLimit: int64(cfg.System.Transfers.DownloadLimit) * 1024 * 1024,
			TempDir:    cfg.System.TmpDirectory,
		}
		start := time.Now()
		_, err := svc.opts.Backups.ExtractTransferSnapshot(ctx, repo, id, name, dst, opts)
		if errors.Is(err, backup.ErrNotShared) {
			return fmt.Errorf("%w: %v", errBadStream, err)
		}
		if err != nil {
			return extractErr(ctx, fmt.Errorf("%w: the transfer snapshot: %v", ErrBadArchive, err))
		}
		svc.opts.Log.Info("live transfer snapshot extracted from the shared repository", "server", id, "snapshot", name, "duration", time.Since(start).Round(time.Millisecond).String())
		return nil
	}
}

// v5Record applies the records of version 5 (handled true): the snapshot,
// the seeds, and the refusal of anything but seeds until the first pass.
func (a *applier) v5Record(kind byte, d *recDecoder) (handled bool, _ error) {
	switch {
	case kind == recSnapshot:
		return true, a.snapshot(d)
	case kind == recSeed:
		return true, a.seed(d)
	case a.seeding && kind != recPass:
		return true, errBadStream // only seeds follow the snapshot, until the first pass
	}
	return false, nil
}

// snapshot applies the snapshot record: the directory is emptied and the
// snapshot extracted into it; seed records may follow until the first
// pass.
func (a *applier) snapshot(d *recDecoder) error {
	repo, name := d.str(), d.str()
	if d.err != nil {
		return d.err
	}
	if !a.v5 || a.started || a.restore == nil || !validRepositoryID(repo) || !validSnapshotName(name) {
		return errBadStream
	}
	if err := a.dst.RemoveAll(a.ctx, "."); err != nil {
		return err
	}
	clear(a.sums)
	a.started = true
	if err := a.restore(a.ctx, repo, name); err != nil {
		return err
	}
	a.seeding = true
	a.keep = map[pathKey]bool{}
	return nil
}

// seed applies a seed record: the snapshot must hold rel as a regular
// file of that size, which gets the source's mode and time and counts as
// received (its content was checked chunk by chunk as it was extracted).
func (a *applier) seed(d *recDecoder) error {
	rel, mode, mtime := d.head()
	size := d.uvarint()
	if d.err != nil {
		return d.err
	}
	if !a.seeding || size > maxFileSize {
		return errBadStream
	}
	dir, base, err := a.enterParent(rel)
	var fi fs.FileInfo
	if err == nil {
		fi, err = dir.Lstat(base)
	}
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(size) || nlink(fi) > 1 {
		if a.ctx.Err() != nil {
			return context.Cause(a.ctx)
		}
		return fmt.Errorf("%w: the snapshot does not hold %s as the source stored it", ErrManifestMismatch, shortPath(rel))
	}
	if err := dir.Chmod(base, mode); err != nil {
		return err
	}
	t := time.Unix(0, mtime)
	if err := dir.Lchtimes(base, t, t); err != nil {
		return err
	}
	key := keyOf(rel)
	a.sums[key] = fileSum{size: int64(size), seeded: true}
	a.keep[key] = true
	for p := path.Dir(rel); p != "."; p = path.Dir(p) {
		k := keyOf(p)
		if a.keep[k] {
			break
		}
		a.keep[k] = true
	}
	a.seededFiles++
	return nil
}

// prune ends the seeds (at the first pass record): whatever the snapshot
// holds that no seed named (directories without a seeded file, links,
// files the source will send or no longer has) is removed, so that the
// tree holds only what the source's index says the target has.
func (a *applier) prune() error {
	var gone []string
	err := a.dst.WalkContext(a.ctx, ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." || a.keep[keyOf(rel)] {
			return nil
		}
		gone = append(gone, rel)
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, rel := range gone {
		if a.stack != nil {
			a.stack.Leave(rel)
		}
		if err := a.dst.RemoveAll(a.ctx, rel); err != nil {
			return err
		}
	}
	a.seeding, a.keep = false, nil
	if a.restored != nil {
		a.restored()
	}
	return nil
}

// LiveRestoredHeader marks the informational answer (102) by which the
// target of a version-5 stream tells the source that it holds the
// snapshot's files: the source stops the server only after it (the
// stream itself carries nothing back).
const LiveRestoredHeader = "X-Wharf-Live-Restored"

// maxRestoreWait bounds the source's wait for the target's restore of the
// snapshot (an intermediary that drops informational answers must not
// hold the transfer forever): past it, the source goes on as if told.
const maxRestoreWait = time.Hour

// restoredTrace is a client trace that closes the returned channel at the
// target's informational answer that the snapshot is restored.
func restoredTrace() (*httptrace.ClientTrace, <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	return &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		if code == http.StatusProcessing && h.Get(LiveRestoredHeader) != "" {
			once.Do(func() { close(ch) })
		}
		return nil
	}}, ch
}

// waitRestored sends what is buffered and waits until the target says it
// holds the snapshot's files (the server keeps running meanwhile), the
// stream ends, or maxRestoreWait passed.
func (svc *Service) waitRestored(ls *liveSender, tl transferLog) error {
	ls.cw.flush()
	tl.msg("Waiting for the destination to restore the snapshot from the shared backup repository (the server stays online)...")
	timer := time.NewTimer(maxRestoreWait)
	defer timer.Stop()
	select {
	case <-ls.restored:
		return nil
	case <-ls.ctx.Done():
		return context.Cause(ls.ctx)
	case <-timer.C:
		svc.opts.Log.Warn("the target did not say that it restored the snapshot: going on", "snapshot", ls.snap.name)
		return nil
	}
}
