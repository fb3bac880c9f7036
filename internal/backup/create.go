package backup

import (
	"context"
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/ids"
	"github.com/wharf/wharf/internal/metrics"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/usererr"
)

// The server-wide ignore files, used when a request gives no patterns:
// Pterodactyl Wings', Pelican Wings' and the spec's. The patterns of every
// one present are read as one list in this order, so a user's existing file
// keeps its backups the size they were under the old daemon. Each must be a
// regular file (not a link) of at most IgnoreFileMax, as in both Wings.
const (
	PteroIgnoreFile   = ".pteroignore"
	PelicanIgnoreFile = ".pelicanignore"
	IgnoreFile        = ".serviceignore"
	IgnoreFileMax     = 32 << 10
)

// ErrBackupRunning is returned when a backup with that UUID is being made.
var ErrBackupRunning = usererr.New(usererr.Conflict, "A backup with this identifier is already being made.")

// Create starts a backup of srv in the background. The arguments are
// checked first; nothing is started when they are wrong. A backup shares the
// server's job slot with other backups and file jobs: it is refused with a
// *server.BusyError (409) while an exclusive job (install, restore,
// transfer) rewrites the files.
func (s *Service) Create(srv Server, adapter Adapter, backup, ignore string) error {
	if !ids.IsUUID(backup) {
		return ErrBadUUID
	}
	if adapter != Local && adapter != ObjectStore {
		return ErrBadAdapter
	}
	s.mu.Lock()
	if s.running[backup] {
		s.mu.Unlock()
		return ErrBackupRunning
	}
	s.running[backup] = true
	s.mu.Unlock()
	// The job's context ends when the service or the server ends.
	job, err := srv.BeginJob(s.ctx, server.JobBackup)
	if err != nil {
		s.mu.Lock()
		delete(s.running, backup)
		s.mu.Unlock()
		return err
	}
	s.wg.Go(func() {
		defer job.End()
		defer func() {
			s.mu.Lock()
			delete(s.running, backup)
			s.mu.Unlock()
		}()
		s.run(job.Context(), srv, adapter, backup, ignore, job.End)
	})
	return nil
}

// Details is the outcome of a backup as reported to the backend.
type Details struct {
	Checksum string
	Size     int64
	Parts    []panel.BackupPart
}

// run makes the backup; end releases the job slot once the files are read,
// before the outcome is reported.
func (s *Service) run(ctx context.Context, srv Server, adapter Adapter, backup, ignore string, end func()) {
	log := s.log.With("server", srv.UUID(), "backup", backup, "adapter", adapter)
	start := time.Now()
	var (
		d   Details
		err error
	)
	if adapter == Local && s.cfg.Get().BackupFormat() == config.BackupFormatRepository {
		d, err = s.createRepository(ctx, srv, backup, ignore)
	} else if adapter == Local {
		d, err = s.createLocal(ctx, srv, backup, ignore)
	} else {
		d, err = s.createRemote(ctx, srv, backup, ignore)
	}
	end()
	s.metrics.ObserveJob(metrics.Backup, err, d.Size, time.Since(start))
	status := panel.BackupStatus{ChecksumType: "sha1", Parts: []panel.BackupPart{}}
	if err != nil {
		log.Error("backup failed", "error", err)
	} else {
		log.Info("backup done", "size", d.Size, "took", time.Since(start).Round(time.Millisecond))
		status.Checksum, status.Size, status.Successful = d.Checksum, d.Size, true
		if d.Parts != nil {
			status.Parts = d.Parts
		}
	}
	// The backend is told even when the job was cancelled.
	nctx, ncancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer ncancel()
	if nerr := s.panel.SetBackupStatus(nctx, backup, status); nerr != nil {
		// The archive is kept: the backup itself succeeded or failed on its own.
		log.Error("could not report the backup status to the backend", "successful", status.Successful, "error", nerr)
	}
	ev, _ := json.Marshal(map[string]any{
		"uuid": backup, "is_successful": status.Successful, "checksum": status.Checksum,
		"checksum_type": "sha1", "file_size": status.Size,
	})
	srv.Publish(events.New(events.BackupCompleted+":"+backup, string(ev)))
	srv.Publish(events.New(events.BackupCompleted, string(ev)))
}

// ignorePatterns returns the request's patterns, or when there are none
// those of the server's ignore files.
func (s *Service) ignorePatterns(srv Server, ignore string) string {
	if ignore != "" {
		return ignore
	}
	var all strings.Builder
	for _, name := range [...]string{PteroIgnoreFile, PelicanIgnoreFile, IgnoreFile} {
		if p := s.readIgnoreFile(srv, name); p != "" {
			all.WriteString(p)
			all.WriteString("\n")
		}
	}
	return all.String()
}

// readIgnoreFile returns the content of the ignore file name at the root of
// srv, or "" when it is absent or not acceptable (logged).
func (s *Service) readIgnoreFile(srv Server, name string) string {
	files := srv.Files().Trusted()
	fi, err := files.Lstat(name)
	if err != nil {
		return ""
	}
	log := s.log.With("server", srv.UUID())
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		log.Warn("ignoring " + name + ": it is a symbolic link")
		return ""
	case !fi.Mode().IsRegular():
		log.Warn("ignoring " + name + ": not a regular file")
		return ""
	case fi.Size() > IgnoreFileMax:
		log.Warn("ignoring "+name+": larger than 32 KiB", "size", fi.Size())
		return ""
	}
	// ReadFile refuses what is not a regular file once open (a FIFO
	// swapped in never blocks it) and stops past the limit.
	b, err := files.ReadFile(name, IgnoreFileMax)
	if err != nil {
		log.Warn("ignoring "+name, "error", err)
		return ""
	}
	// A link swapped in after the Lstat is refused here: read it again
	// without following.
	if fi2, err := files.Lstat(name); err != nil || fi2.Mode()&os.ModeSymlink != 0 {
		return ""
	}
	return string(b)
}

// writeArchive writes the archive of srv to a temporary file in the backup
// directory and returns it open, with its details. On error nothing is left.
// A durable archive is synced to disk; one only read back for an upload
// and then deleted is not (a crash loses nothing: the backup fails).
func (s *Service) writeArchive(ctx context.Context, srv Server, ignore string, durable bool) (*os.File, archive.Result, error) {
	cfg := s.cfg.Get()
	f, err := CreateTemp(cfg)
	if err != nil {
		return nil, archive.Result{}, err
	}
	fail := func(err error) (*os.File, archive.Result, error) {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, archive.Result{}, err
	}
	// Unbuffered: pgzip hands over whole compressed blocks, and a bufio
	// layer in between measurably slowed the whole pipeline (see
	// docs/benchmarks.md).
	res, err := archive.Write(ctx, f, srv.Files().Trusted(), archive.WriteOptions{
		Ignore:   s.ignorePatterns(srv, ignore),
		Level:    archive.ParseLevel(cfg.System.Backups.CompressionLevel),
		Manifest: true,
		// Restorable by Wings too, for a node switched back (docs/compatibility.md).
		TreeTrailer: true,
		TempDir:     cfg.System.TmpDirectory,
		Hash:        sha1.New, // the backend's checksum_type
	})
	if err == nil && durable {
		err = f.Sync()
	}
	if err != nil {
		return fail(fmt.Errorf("writing the archive: %w", err))
	}
	return f, res, nil
}

func (s *Service) createLocal(ctx context.Context, srv Server, backup, ignore string) (Details, error) {
	f, res, err := s.writeArchive(ctx, srv, ignore, true)
	if err != nil {
		return Details{}, err
	}
	tmp := f.Name()
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return Details{}, err
	}
	if _, err := CommitLocal(s.cfg.Get(), srv.UUID(), backup, tmp); err != nil {
		_ = os.Remove(tmp)
		return Details{}, err
	}
	return Details{Checksum: res.Sum, Size: res.Size}, nil
}
