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
	var (
		path string
		repo *repoSource
	)
	switch req.Adapter {
	case Local:
		p, err := s.Locate(srv, backup)
		if errors.Is(err, ErrNotFound) {
			st, m, rerr := s.repoManifest(s.cfg.Get(), srv.UUID(), backup)
			if rerr != nil {
				return rerr
			}
			repo = &repoSource{st: st, m: m}
		} else if err != nil {
			return err
		}
		path = p
	case ObjectStore:
		if req.DownloadURL == "" {
			return ErrNoURL
		}
	default:
		return ErrBadAdapter
	}
	// The job's context ends when the service or the server ends.
	job, err := srv.BeginJob(s.ctx, server.JobRestore)
	if err != nil {
		return err
	}
	jctx, end := job.Context(), job.End
	var src io.ReadCloser
	if req.Adapter == ObjectStore {
		// The request is made now, so that a refused address, status or
		// content type is answered with 400 before anything changes.
		body, err := s.download(jctx, req.DownloadURL)
		if err != nil {
			end()
			return err
		}
		src = body
	} else if repo != nil {
		// A bare stream is extracted as it is stored (its chunks are
		// checked as they are read); an older one has its integrity entry.
		if repo.m.Bare {
			repo.ReadCloser = repo.st.Reader(repo.m)
		} else {
			repo.ReadCloser = gzipStream(jctx, repo.st, repo.m, archive.LevelNone, s.cfg.Get().System.TmpDirectory)
		}
		src = repo
	} else {
		f, err := os.Open(path)
		if err != nil {
			end()
			return ErrNotFound
		}
		src = f
	}
	s.wg.Go(func() {
		defer end()
		defer src.Close()
		s.restore(job, srv, backup, req, src)
	})
	return nil
}

// restore runs a claimed restore, writing through the job's filesystem;
// the job ends as soon as the files are in place, before the outcome is
// announced.
func (s *Service) restore(job *server.Job, srv Server, backup string, req RestoreRequest, src io.ReadCloser) {
	ctx := job.Context()
	log := s.log.With("server", srv.UUID(), "backup", backup, "adapter", req.Adapter)
	start := time.Now()
	srv.Publish(events.New(events.DaemonMessage, "Starting the restoration of a backup: the server cannot start and its files cannot be changed until it is done."))
	res, err := s.extract(ctx, srv, job.FS().Trusted(), req, src)
	s.metrics.ObserveJob(metrics.Restore, err, res.Bytes, time.Since(start))
	job.End()
	if err != nil {
		log.Error("restore failed", "error", err)
		srv.Publish(events.New(events.DaemonMessage, "The restoration of the backup failed: "+err.Error()))
	} else {
		log.Info("restore done", "files", res.Files, "bytes", res.Bytes, "verified", res.Verified, "took", time.Since(start).Round(time.Millisecond))
		from := "local"
		if req.Adapter == ObjectStore {
			from = "remote"
		}
		srv.Publish(events.New(events.DaemonMessage, "Completed server restoration from "+from+" backup."))
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

func (s *Service) extract(ctx context.Context, srv Server, files *sandbox.FS, req RestoreRequest, src io.ReadCloser) (archive.ExtractResult, error) {
	if err := srv.StopForJob(ctx, restoreStopWait); err != nil {
		return archive.ExtractResult{}, fmt.Errorf("the server did not stop: %w", err)
	}
	cfg := s.cfg.Get()
	// Extract reads ahead in large buffers itself.
	r := io.Reader(src)
	repo, fromRepo := src.(*repoSource)
	var names *archive.Names
	if fromRepo && req.TruncateDirectory {
		// As for an archive: a damaged backup changes nothing. Reading it
		// whole also tells what it writes, so that the files it writes
		// again need not be removed first (see archive.Prune).
		var err error
		if names, err = repo.names(ctx); err != nil {
			return archive.ExtractResult{}, err
		}
	}
	if req.TruncateDirectory && req.Adapter == Local && !fromRepo {
		// The local archive is read once completely before the directory
		// is emptied: a corrupt archive then changes nothing.
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
	}
	if fromRepo && repo.m.Bare {
		opts.Plain, opts.NoManifest = true, true
	}
	if req.TruncateDirectory {
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
	// The extractor may wrap the chunk error in its own: check the
	// chunks whenever a repository restore fails.
	if fromRepo && err != nil && ctx.Err() == nil {
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
