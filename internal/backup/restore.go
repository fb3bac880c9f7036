package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/ids"
	"github.com/wharf/wharf/internal/metrics"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
)

// restoreStopWait is how long a restore waits for a running server to stop.
const restoreStopWait = 2 * time.Minute

// usageRefreshTimeout bounds the disk usage walk after a restore. It runs detached from the
// restore's context (the usage must be right even when the restore was cancelled), and a hung
// disk must not keep the daemon's shutdown waiting for it forever.
const usageRefreshTimeout = 5 * time.Minute

// RestoreRequest is the body of the restore endpoint.
type RestoreRequest struct {
	Adapter           Adapter
	TruncateDirectory bool
	DownloadURL       string
}

// Restore checks the request, opens the archive (for object_store: the
// download, up to its headers) and claims the server's job slot (the
// server is seen restoring), then restores in the background. Errors
// returned here change nothing: a missing local backup is ErrNotFound, a
// refused download a *DownloadError, a server busy with another job (an
// install, a transfer, a restore, a backup) a *server.BusyError.
func (s *Service) Restore(ctx context.Context, srv Server, backup string, req RestoreRequest) error {
	if !ids.IsUUID(backup) {
		return ErrBadUUID
	}
	if req.Adapter == ObjectStore && req.DownloadURL == "" {
		return ErrNoURL
	}
	facts, path, repo, err := s.restoreFacts(srv, backup, req)
	if err != nil {
		return err
	}
	plan, err := planRestore(facts)
	if err != nil {
		return err
	}
	// The job's context ends when the service or the server ends.
	job, err := srv.BeginJob(s.ctx, server.JobRestore)
	if err != nil {
		return err
	}
	jctx, end := job.Context(), job.End
	src, err := s.openRestoreSource(jctx, plan, req.DownloadURL, path, repo)
	if err != nil {
		end()
		return err
	}
	s.wg.Go(func() {
		defer end()
		defer src.Close()
		s.restore(job, srv, backup, plan, src)
	})
	return nil
}

// sourceKind is where a restore reads its archive from.
type sourceKind int

const (
	// sourceDownload: the archive the panel's URL gives (object_store).
	sourceDownload sourceKind = iota + 1
	// sourceArchive: the node's local .tar.gz of the backup.
	sourceArchive
	// sourceRepoBare: a repository backup stored as a bare stream, extracted
	// as it is stored (its chunks are checked as they are read).
	sourceRepoBare
	// sourceRepoGzip: an older repository backup, read as a tar.gz with its
	// integrity entry.
	sourceRepoGzip
)

// restoreInputs are the four facts a restore's source and steps depend on.
type restoreInputs struct {
	adapter   Adapter
	truncate  bool // truncate_directory
	localFile bool // local: the backup is a .tar.gz on this node (else it is in the repository)
	bare      bool // local, from the repository: its manifest says a bare stream
}

// restorePlan is what planRestore decided: the source and what the restore
// does with it.
type restorePlan struct {
	source sourceKind
	// checkFirst: the local archive is read once completely (archive.Check)
	// before the directory is emptied, so that a corrupt archive changes
	// nothing.
	checkFirst bool
	// listNames: the repository backup is read whole (every chunk checked)
	// before anything changes, and the names it writes are kept, so that
	// only what it does not write again is removed (archive.Prune).
	listNames bool
	// truncate: the directory is emptied once the archive is known to be
	// readable (Ready: after its first entry).
	truncate bool
	// plain: the stream is a bare tar without the integrity entry.
	plain bool
	// checkChunks: a failed extraction asks the repository whether a
	// chunk is damaged (the extractor may wrap the chunk error in its own).
	checkChunks bool
	// adapter is the request's; from names the source in the message to
	// the console.
	adapter Adapter
	from    string
}

// planRestore decides a restore's source and steps from the four facts,
// in one place. An adapter that is neither local nor object_store is
// ErrBadAdapter.
func planRestore(in restoreInputs) (restorePlan, error) {
	p := restorePlan{adapter: in.adapter, truncate: in.truncate, from: "local"}
	switch {
	case in.adapter == ObjectStore:
		p.source, p.from = sourceDownload, "remote"
	case in.adapter != Local:
		return restorePlan{}, ErrBadAdapter
	case in.localFile:
		p.source, p.checkFirst = sourceArchive, in.truncate
	case in.bare:
		p.source, p.plain = sourceRepoBare, true
	default:
		p.source = sourceRepoGzip
	}
	if p.source == sourceRepoBare || p.source == sourceRepoGzip {
		p.listNames, p.checkChunks = in.truncate, true
	}
	return p, nil
}

// restoreFacts finds where the backup is (for local: the node's archive
// at path, else the repository's manifest in repo; a backup in neither is
// ErrNotFound).
func (s *Service) restoreFacts(srv Server, backup string, req RestoreRequest) (in restoreInputs, path string, repo *repoSource, err error) {
	in = restoreInputs{adapter: req.Adapter, truncate: req.TruncateDirectory}
	if req.Adapter != Local {
		return in, "", nil, nil
	}
	path, err = s.Locate(srv, backup)
	if errors.Is(err, ErrNotFound) {
		st, m, rerr := s.repoManifest(s.cfg.Get(), srv.UUID(), backup)
		if rerr != nil {
			return in, "", nil, rerr
		}
		in.bare = m.Bare
		return in, "", &repoSource{st: st, m: m}, nil
	}
	in.localFile = err == nil
	return in, path, nil, err
}

// openRestoreSource opens plan's source: the download (the request is
// made now, so that a refused address, status or content type is answered
// with 400 before anything changes), the local archive, or the repository
// stream.
func (s *Service) openRestoreSource(ctx context.Context, plan restorePlan, url, path string, repo *repoSource) (io.ReadCloser, error) {
	switch plan.source {
	case sourceDownload:
		return s.download(ctx, url)
	case sourceRepoBare:
		repo.ReadCloser = repo.st.Reader(repo.m)
		return repo, nil
	case sourceRepoGzip:
		repo.ReadCloser = gzipStream(ctx, repo.st, repo.m, archive.LevelNone, s.cfg.Get().System.TmpDirectory)
		return repo, nil
	default:
		f, err := os.Open(path)
		if err != nil {
			return nil, ErrNotFound
		}
		return f, nil
	}
}

// restore runs a claimed restore, writing through the job's filesystem;
// the job ends as soon as the files are in place, before the outcome is
// announced.
func (s *Service) restore(job *server.Job, srv Server, backup string, plan restorePlan, src io.ReadCloser) {
	ctx := job.Context()
	log := s.log.With("server", srv.UUID(), "backup", backup, "adapter", plan.adapter)
	start := time.Now()
	srv.Publish(events.New(events.DaemonMessage, "Starting the restoration of a backup: the server cannot start and its files cannot be changed until it is done."))
	res, err := s.extract(ctx, srv, job.FS().Trusted(), plan, src)
	s.metrics.ObserveJob(metrics.Restore, err, res.Bytes, time.Since(start))
	job.End()
	if err != nil {
		log.Error("restore failed", "error", err)
		srv.Publish(events.New(events.DaemonMessage, "The restoration of the backup failed: "+err.Error()))
	} else {
		log.Info("restore done", "files", res.Files, "bytes", res.Bytes, "verified", res.Verified, "took", time.Since(start).Round(time.Millisecond))
		srv.Publish(events.New(events.DaemonMessage, "Completed server restoration from "+plan.from+" backup."))
	}
	srv.Publish(events.New(events.BackupRestoreCompleted, ""))
	nctx, ncancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer ncancel()
	if nerr := s.panel.SetRestoreStatus(nctx, backup, err == nil); nerr != nil {
		log.Error("could not report the restore status to the backend", "error", nerr)
	}
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), usageRefreshTimeout)
	defer ucancel()
	if _, uerr := srv.Files().RefreshUsage(uctx); uerr != nil {
		log.Warn("disk usage refresh after the restore failed", "error", uerr)
	}
}

func (s *Service) extract(ctx context.Context, srv Server, files *sandbox.FS, plan restorePlan, src io.ReadCloser) (archive.ExtractResult, error) {
	if err := srv.StopForJob(ctx, restoreStopWait); err != nil {
		return archive.ExtractResult{}, fmt.Errorf("the server did not stop: %w", err)
	}
	cfg := s.cfg.Get()
	// Extract reads ahead in large buffers itself.
	r := io.Reader(src)
	repo, _ := src.(*repoSource)
	var names *archive.Names
	if plan.listNames {
		// As for an archive: a damaged backup changes nothing. Reading it
		// whole also tells what it writes, so that the files it writes
		// again need not be removed first (see archive.Prune).
		var err error
		if names, err = repo.names(ctx); err != nil {
			return archive.ExtractResult{}, err
		}
	}
	if plan.checkFirst {
		f, ok := src.(*os.File)
		if !ok {
			return archive.ExtractResult{}, errors.New("local archive is not a file")
		}
		if err := archive.Check(ctx, f); err != nil {
			return archive.ExtractResult{}, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return archive.ExtractResult{}, err
		}
		r = f
	}
	opts := archive.ExtractOptions{
		WriteLimit: int64(cfg.System.Backups.WriteLimit * (1 << 20)),
		TempDir:    cfg.System.TmpDirectory,
		OnEntry: func(name string) {
			srv.Publish(events.New(events.DaemonMessage, "(restoring): "+name))
		},
		Plain:      plan.plain,
		NoManifest: plan.plain,
	}
	if plan.truncate {
		// For a download, the archive is known to be readable once its
		// first entry was read: only then is the directory emptied.
		opts.Ready = func() error {
			if names != nil {
				return archive.Prune(ctx, files, names)
			}
			return files.RemoveAll(ctx, ".")
		}
	}
	res, err := archive.Extract(ctx, r, files, opts)
	if plan.checkChunks && err != nil && ctx.Err() == nil {
		if d := repo.st.Check(repo.m); d != nil {
			return res, &DamageError{D: d}
		}
	}
	return res, err
}

// repoSource is the tar.gz of a repository backup being restored.
type repoSource struct {
	io.ReadCloser
	st *chunkstore.Store
	m  chunkstore.Manifest
}

// names reads the whole backup, every chunk checked, and returns the names
// its extraction writes (nil for a backup of more entries than
// archive.Names holds). A damaged backup is a *DamageError.
func (r *repoSource) names(ctx context.Context) (*archive.Names, error) {
	rd := r.st.Reader(r.m)
	defer rd.Close()
	names, err := archive.ListNames(ctx, rd, archive.ExtractOptions{Plain: true, NoManifest: r.m.Bare})
	if err == nil || ctx.Err() != nil {
		return names, err
	}
	if d := r.st.Check(r.m); d != nil {
		return nil, &DamageError{D: d}
	}
	return nil, err
}
