package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/klauspost/pgzip"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/config"
)

// The repository format (system.backups.format: repository): the backup's
// uncompressed tar stream, the same bytes an archive backup gzips, goes
// into a chunkstore. Restores and downloads regenerate the tar.gz from it,
// so the panel and Wings' extractor see the same archive layout.

// repository returns the open repository of the configuration.
func (s *Service) repository(cfg *config.Config) (*chunkstore.Store, error) {
	p := cfg.BackupRepositoryPath()
	s.repoMu.Lock()
	defer s.repoMu.Unlock()
	if s.repo != nil && s.repo.Dir() == p {
		return s.repo, nil
	}
	st, err := chunkstore.Open(p)
	if err != nil {
		return nil, fmt.Errorf("opening the backup repository: %w", err)
	}
	s.repo = st
	return st, nil
}

// existingRepository is the repository when it exists on disk (backups
// made under the repository format stay readable after a switch back to
// archive), else nil.
func (s *Service) existingRepository(cfg *config.Config) *chunkstore.Store {
	if _, err := os.Stat(cfg.BackupRepositoryPath()); err != nil {
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
	// archive.Write gzips; level none makes that a cheap framing, undone
	// here, so the store chunks the plain tar stream.
	pr, pw := io.Pipe()
	werr := make(chan error, 1)
	go func() {
		_, err := archive.Write(ctx, pw, srv.Files().Trusted(), archive.WriteOptions{
			Ignore:      s.ignorePatterns(srv, ignore),
			Level:       archive.LevelNone,
			Manifest:    true,
			TreeTrailer: true,
			TempDir:     cfg.System.TmpDirectory,
		})
		pw.CloseWithError(err)
		werr <- err
	}()
	gz, err := pgzip.NewReaderN(pr, 1<<20, 4)
	if err != nil {
		pr.CloseWithError(err)
		<-werr
		return Details{}, fmt.Errorf("reading the archive stream: %w", err)
	}
	m, err := st.Write(srv.UUID(), backup, gz)
	if err == nil {
		// Drain the gzip trailer so a writer error is seen.
		_, err = io.Copy(io.Discard, gz)
	}
	pr.CloseWithError(errors.New("backup ended"))
	if aerr := <-werr; aerr != nil {
		if m.Backup != "" {
			_ = st.Delete(srv.UUID(), backup)
		}
		return Details{}, fmt.Errorf("writing the archive: %w", aerr)
	}
	if err != nil {
		return Details{}, err
	}
	return Details{Checksum: m.SHA1, Size: m.Size}, nil
}

// gzipStream returns the tar.gz of backup m at level, generated as it is
// read. A damaged chunk ends it with a *chunkstore.ChunkError.
func gzipStream(st *chunkstore.Store, m chunkstore.Manifest, level int) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		gw, err := pgzip.NewWriterLevel(pw, level)
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		rd := st.Reader(m)
		defer rd.Close()
		_, err = io.Copy(gw, rd)
		if cerr := gw.Close(); err == nil {
			err = cerr
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// WriteDownload writes the tar.gz of a repository backup of server to w;
// ErrNotFound when there is none.
func (s *Service) OpenRepositoryDownload(server, backup string) (io.ReadCloser, error) {
	st, m, err := s.repoManifest(s.cfg.Get(), server, backup)
	if err != nil {
		return nil, err
	}
	return gzipStream(st, m, archive.LevelBestSpeed), nil
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
