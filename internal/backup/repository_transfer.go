package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/sandbox"
)

// Transfers by manifest between nodes that share the repository (issue
// 36): the source stores the server's files as a snapshot of the shared
// repository (only what the bucket lacks is uploaded), the target reads
// the snapshot from the same bucket.

// ErrNotShared is a transfer snapshot asked of a node whose repository is
// not shared, or not the one the source named.
var ErrNotShared = errors.New("this node's backup repository is not the shared repository the source named")

// SharedRepositoryID is the id of this node's backup repository when it
// is shared with other nodes (system.backups.format: repository and
// system.backups.repository.shared); ok false otherwise, or when it cannot
// be read.
func (s *Service) SharedRepositoryID(ctx context.Context) (id string, ok bool) {
	cfg := s.cfg.Get()
	if !sharedRepository(cfg) {
		return "", false
	}
	st, err := s.repository(cfg)
	if err != nil {
		return "", false
	}
	id, err = st.RepositoryID(ctx, false)
	return id, err == nil && id != ""
}

func sharedRepository(cfg *config.Config) bool {
	return cfg.System.Backups.Format == config.BackupFormatRepository && cfg.System.Backups.Repository.Shared
}

// WriteTransferSnapshot stores every file of files (no ignore file
// applies: a transfer moves the whole server) as the snapshot name of
// server in the shared repository, and returns its checksum
// (chunkstore.ChunkListSHA1).
func (s *Service) WriteTransferSnapshot(ctx context.Context, server string, files archive.Source, name string) (string, error) {
	return s.writeTransferSnapshot(ctx, server, files, name, nil)
}

func (s *Service) writeTransferSnapshot(ctx context.Context, server string, files archive.Source, name string, seen func(rel string, fi fs.FileInfo)) (string, error) {
	cfg := s.cfg.Get()
	if !sharedRepository(cfg) {
		return "", ErrNotShared
	}
	st, err := s.repository(cfg)
	if err != nil {
		return "", err
	}
	// Held from before its manifest exists until DeleteTransferSnapshot:
	// no collection of any node takes it while this transfer runs.
	h, err := st.HoldTransfer(ctx, server, name)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.transfers[server+"/"+name] = h
	s.mu.Unlock()
	m, err := st.WriteBackup(ctx, server, name, func(w *chunkstore.Writer) error {
		w.SetBare()
		var hook archive.FileHook = w.FileHook(ctx, nil)
		if seen != nil {
			hook = seenFiles{FileHook: hook, seen: seen}
		}
		_, err := archive.Write(ctx, w, files, archive.WriteOptions{
			Compress:    func(w io.Writer) (io.WriteCloser, error) { return nopCloser{w}, nil },
			Files:       hook,
			TreeTrailer: true,
			TempDir:     cfg.System.TmpDirectory,
		})
		if err != nil {
			return fmt.Errorf("writing the transfer snapshot: %w", err)
		}
		return nil
	})
	if err != nil {
		s.releaseTransfer(server, name)
		return "", err
	}
	return m.SHA1, nil
}

// TransferSnapshotValid is nil while the snapshot name of server, written
// by WriteTransferSnapshot, is surely still in the repository: this node's
// lease on the shared repository has been live for every other node
// without a break since (chunkstore.TransferHold.Valid). A transfer checks
// it before it names the snapshot to its target.
func (s *Service) TransferSnapshotValid(server, name string) error {
	s.mu.Lock()
	h := s.transfers[server+"/"+name]
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("the transfer snapshot %s is not held by this node", name)
	}
	if err := h.Valid(); err != nil {
		return fmt.Errorf("the transfer snapshot may have been collected by another node: %w", err)
	}
	return nil
}

// releaseTransfer ends the hold of a transfer snapshot (if any).
func (s *Service) releaseTransfer(server, name string) {
	s.mu.Lock()
	h := s.transfers[server+"/"+name]
	delete(s.transfers, server+"/"+name)
	s.mu.Unlock()
	if h != nil {
		h.Release()
	}
}

// DeleteTransferSnapshot removes a transfer snapshot (its blobs stay as
// long as another backup names them), ends this node's hold of it, and
// schedules a collection. A snapshot whose deletion fails here is
// collected later: no transfer holds it any more.
func (s *Service) DeleteTransferSnapshot(server, name string) error {
	defer s.releaseTransfer(server, name)
	cfg := s.cfg.Get()
	st, err := s.repository(cfg)
	if err != nil {
		return err
	}
	err = st.Delete(server, name)
	if errors.Is(err, chunkstore.ErrNotFound) {
		err = nil
	}
	s.releaseTransfer(server, name)
	s.scheduleGC(st)
	return err
}

// transferReadAhead is the read-ahead of a transfer's restore from the
// bucket: ranged reads of up to 8 MiB (chunkstore's largest), about four
// in flight (each charged its read and its decoded chunks), instead of a
// download's 4 MiB in all. It bounds the memory the restore holds
// (docs/benchmarks.md, issue 36 "the time figures").
const transferReadAhead = 64 << 20

// ExtractTransferSnapshot extracts the snapshot name of server from the
// shared repository repoID into dst and returns its checksum: refused
// (ErrNotShared) when this node's repository is not that one. Every chunk
// is checked against its hash as it is read.
func (s *Service) ExtractTransferSnapshot(ctx context.Context, repoID, server, name string, dst *sandbox.FS, opts archive.ExtractOptions) (string, error) {
	if id, ok := s.SharedRepositoryID(ctx); !ok || id != repoID {
		return "", ErrNotShared
	}
	st, err := s.repository(s.cfg.Get())
	if err != nil {
		return "", err
	}
	// The target's hold: its own collections keep the snapshot while it
	// reads it, and its lease defers other nodes' (also when the source
	// died meanwhile).
	h, err := st.HoldTransfer(ctx, server, name)
	if err != nil {
		return "", fmt.Errorf("the transfer snapshot: %w", err)
	}
	defer h.Release()
	m, err := st.Manifest(server, name)
	if err != nil {
		return "", fmt.Errorf("the transfer snapshot: %w", err)
	}
	if !m.Bare {
		return "", errors.New("the transfer snapshot is not a bare stream")
	}
	rd := st.ReaderAhead(m, transferReadAhead)
	defer rd.Close()
	opts.Plain, opts.NoManifest = true, true
	if _, err := archive.Extract(ctx, rd, dst, opts); err != nil {
		if d := st.Check(m); d != nil && ctx.Err() == nil {
			return "", &DamageError{D: d}
		}
		return "", err
	}
	return m.SHA1, nil
}
