package backup

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"

	"github.com/wharf/wharf/internal/chunkstore"
)

// Backups that travel with a transfer between nodes sharing the repository
// (issue 36): the source names each backup's manifest, the target checks
// it and keeps its own copy (chunkstore's adopt.go); no backup byte
// crosses between the nodes.

// ErrBadReference is a backup reference the target refuses: no such
// manifest of the server being transferred, or not the checksum sent.
var ErrBadReference = errors.New("the backup reference names no backup of this server in the shared repository with that checksum")

// RepositoryBackupRef is how a source names backup of server in the shared
// repository: the name of its manifest and its checksum.
func (s *Service) RepositoryBackupRef(server, backup string) (name, sum string, err error) {
	cfg := s.cfg.Get()
	if !sharedRepository(cfg) {
		return "", "", ErrNotShared
	}
	st, err := s.repository(cfg)
	if err != nil {
		return "", "", err
	}
	name, m, err := st.ManifestRef(server, backup)
	if errors.Is(err, chunkstore.ErrNotFound) {
		return "", "", ErrNotFound
	}
	return name, m.SHA1, err
}

// CheckBackupReference is the target's check of a reference: this node's
// repository is repoID, and the manifest name of server (the server being
// transferred: never another's) is backup's with checksum sum.
func (s *Service) CheckBackupReference(ctx context.Context, repoID, server, backup, name, sum string) error {
	_, err := s.readReference(ctx, repoID, server, backup, name, sum)
	return err
}

func (s *Service) readReference(ctx context.Context, repoID, server, backup, name, sum string) ([]byte, error) {
	if id, ok := s.SharedRepositoryID(ctx); !ok || id != repoID {
		return nil, ErrNotShared
	}
	st, err := s.repository(s.cfg.Get())
	if err != nil {
		return nil, err
	}
	raw, m, err := st.ReadManifestNamed(ctx, server, name)
	if errors.Is(err, chunkstore.ErrNotFound) {
		return nil, fmt.Errorf("%w (backup %s: no manifest %q)", ErrBadReference, backup, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the manifest of backup %s: %w", backup, err)
	}
	if m.Backup != backup || (m.Server != "" && m.Server != server) {
		return nil, fmt.Errorf("%w (the manifest %q is not backup %s's)", ErrBadReference, name, backup)
	}
	if subtle.ConstantTimeCompare([]byte(m.SHA1), []byte(sum)) != 1 {
		return nil, fmt.Errorf("%w (backup %s: checksum)", ErrBadReference, backup)
	}
	return raw, nil
}

// AdoptBackupReference reads the referenced manifest again, checks it as
// CheckBackupReference does, and stores it as this node's copy of backup
// of server. A backup this node already holds a copy of is kept.
func (s *Service) AdoptBackupReference(ctx context.Context, repoID, server, backup, name, sum string) (adopted bool, _ error) {
	raw, err := s.readReference(ctx, repoID, server, backup, name, sum)
	if err != nil {
		return false, err
	}
	st, err := s.repository(s.cfg.Get())
	if err != nil {
		return false, err
	}
	if st.HasAdopted(server, backup) {
		return false, nil
	}
	if err := st.Adopt(ctx, server, backup, raw); err != nil {
		return false, fmt.Errorf("adopting backup %s: %w", backup, err)
	}
	return true, nil
}

// ForgetTravelledBackup deletes this node's copies of a backup that
// travelled by reference to a node that adopted it, and schedules a
// collection (the chunks stay: the target's copy names them).
func (s *Service) ForgetTravelledBackup(server, backup string) error {
	cfg := s.cfg.Get()
	st, err := s.repository(cfg)
	if err != nil {
		return err
	}
	err = st.Delete(server, backup)
	if errors.Is(err, chunkstore.ErrNotFound) {
		err = nil
	}
	s.scheduleGC(st)
	return err
}
