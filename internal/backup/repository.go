package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/backupview"
	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/config"
)

// The repository format (system.backups.format: repository): the backup's
// uncompressed tar stream, the same bytes an archive backup gzips, goes
// into a chunkstore. Restores and downloads regenerate the tar.gz from it,
// so the panel and Wings' extractor see the same archive layout.

// repository returns the open repository of the configuration.
func (s *Service) repository(cfg *config.Config) (*chunkstore.Store, error) {
	key := repositoryKey(cfg)
	s.repoMu.Lock()
	defer s.repoMu.Unlock()
	if s.repo == nil || s.repoKey != key {
		st, err := openRepository(cfg)
		if err != nil {
			return nil, fmt.Errorf("opening the backup repository: %w", err)
		}
		s.repo, s.repoKey = st, key
		s.browse.open.Store(&openRepo{st, key})
	}
	r := cfg.System.Backups.Repository
	s.repo.SetPolicy(chunkstore.Policy{NodeWideDedup: r.NodeWideDedup(), MaxUnusedPercent: r.MaxUnusedPercent})
	return s.repo, nil
}

// existingRepository is the repository when it exists on disk (backups
// made under the repository format stay readable after a switch back to
// archive), else nil.
func (s *Service) existingRepository(cfg *config.Config) *chunkstore.Store {
	if !repositoryMayExist(cfg) {
		return nil
	}
	st, err := s.repository(cfg)
	if err != nil {
		return nil
	}
	return st
}

// repoManifest finds backup of srv in the repository, or ErrNotFound.
func (s *Service) repoManifest(cfg *config.Config, server, backup string) (*chunkstore.Store, chunkstore.Manifest, error) {
	st := s.existingRepository(cfg)
	if st == nil {
		return nil, chunkstore.Manifest{}, ErrNotFound
	}
	m, err := st.Manifest(server, backup)
	if errors.Is(err, chunkstore.ErrNotFound) {
		return nil, chunkstore.Manifest{}, ErrNotFound
	}
	return st, m, err
}

func (s *Service) createRepository(ctx context.Context, srv Server, backup, ignore string) (Details, error) {
	cfg := s.cfg.Get()
	st, err := s.repository(cfg)
	if err != nil {
		return Details{}, err
	}
	// The tar stream goes straight (uncompressed, synchronously) into the
	// store, which chunks each regular file's entry on its own; files
	// unchanged since the server's latest backup are not read: their
	// chunks are reused (repoFiles). It is bare: no file is hashed for an
	// integrity entry (the chunks' SHA-256 checks a restore; a download
	// is sealed with the entry, WriteRepositoryArchive).
	var read []string
	var onRead func(string)
	if s.repoFilesRead != nil {
		onRead = func(rel string) { read = append(read, rel) }
	}
	m, err := st.WriteBackup(ctx, srv.UUID(), backup, func(w *chunkstore.Writer) error {
		w.SetBare()
		_, err := archive.Write(ctx, w, srv.Files().Trusted(), archive.WriteOptions{
			Ignore:      s.ignorePatterns(srv, ignore),
			Compress:    func(w io.Writer) (io.WriteCloser, error) { return nopCloser{w}, nil },
			Files:       w.FileHook(ctx, onRead),
			TreeTrailer: true,
			TempDir:     cfg.System.TmpDirectory,
		})
		if err != nil {
			return fmt.Errorf("writing the archive: %w", err)
		}
		return nil
	})
	if err != nil {
		return Details{}, err
	}
	// The backups folder's index of it (issue 35 follow-up): its first
	// listing reads the directory asked for, not the manifest and chunks.
	// The backup is made without it: the folder then builds its tree.
	if err := backupview.WriteIndex(ctx, st, m); err != nil {
		s.log.Warn("the backups folder's index of a backup was not written: its first listing reads the backup", "server", srv.UUID(), "backup", backup, "error", err)
	}
	if s.repoFilesRead != nil {
		s.repoFilesRead(read)
	}
	return Details{Checksum: m.SHA1, Size: m.Size}, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// OpenRepositoryStream opens the tar.gz of a repository backup of server,
// generated as it is read until ctx ends (a cancelled transfer that sends
// it); ErrNotFound when there is none. The caller closes it. Signed
// downloads open it through OpenRepositoryDownload (downloads.go).
func (s *Service) OpenRepositoryStream(ctx context.Context, server, backup string) (io.ReadCloser, error) {
	st, m, err := s.repoManifest(s.cfg.Get(), server, backup)
	if err != nil {
		return nil, err
	}
	return gzipStream(ctx, st, m, archive.LevelBestSpeed, s.cfg.Get().System.TmpDirectory), nil
}

// InRepository reports whether this node's repository holds backup of
// server: nil if so, ErrNotFound if not (or there is no repository).
func (s *Service) InRepository(server, backup string) error {
	_, _, err := s.repoManifest(s.cfg.Get(), server, backup)
	return err
}

// DamageError is a repository backup with damaged chunks.
type DamageError struct{ D *chunkstore.Damage }

func (e *DamageError) Error() string {
	files := e.D.Files
	more := ""
	if len(files) > 20 {
		files, more = files[:20], fmt.Sprintf(" and %d more", len(e.D.Files)-20)
	}
	return fmt.Sprintf("the backup is damaged in the repository (%d damaged chunks, first: %v); affected files: %s%s",
		len(e.D.Chunks), e.D.Chunks[0], strings.Join(files, ", "), more)
}

// scheduleGC runs a garbage collection of the repository in the
// background; one asked for while one runs runs again after it, so a
// delete's space is always reclaimed.
func (s *Service) scheduleGC(st *chunkstore.Store) {
	s.repoMu.Lock()
	if s.gcRunning {
		s.gcAgain = true
		s.repoMu.Unlock()
		return
	}
	s.gcRunning = true
	s.repoMu.Unlock()
	s.wg.Go(func() {
		for {
			n, err := st.GC()
			if errors.Is(err, chunkstore.ErrGCDeferred) {
				// Another node of a shared repository holds a lease:
				// tried again until it is released (or expires).
				s.log.Debug("backup repository garbage collection deferred", "error", err)
				if !s.sleepCtx(gcRetry) {
					s.endGC()
					return
				}
				continue
			}
			if err != nil {
				s.log.Error("backup repository garbage collection failed", "error", err)
			} else if n > 0 {
				s.log.Info("backup repository garbage collection", "chunks_removed", n)
			}
			s.repoMu.Lock()
			if !s.gcAgain || s.ctx.Err() != nil {
				s.gcRunning = false
				s.repoMu.Unlock()
				return
			}
			s.gcAgain = false
			s.repoMu.Unlock()
		}
	})
}

// gcRetry is how soon a collection deferred by another node's lease on a
// shared repository is tried again.
const gcRetry = 10 * time.Second

// sleepCtx waits d or until the service ends (false).
func (s *Service) sleepCtx(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// endGC marks the background collection ended.
func (s *Service) endGC() {
	s.repoMu.Lock()
	s.gcRunning, s.gcAgain = false, false
	s.repoMu.Unlock()
}
