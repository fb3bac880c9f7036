package backup

import (
	"context"
	"fmt"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/chunkstore/s3backend"
	"github.com/wharf/wharf/internal/config"
)

// RepositoryBackend returns where the repository of cfg keeps its objects:
// the bucket of system.backups.repository.s3 when one is set (asked for
// once, so that wrong credentials or a missing bucket fail here, naming the
// key, rather than at the first backup), else local(dir) on the directory
// cfg.BackupRepositoryPath(). local is the directory backend's constructor,
// passed in so that this choice does not depend on how that backend is
// built.
func RepositoryBackend(ctx context.Context, cfg *config.Config, local func(dir string) (chunkstore.Backend, error)) (chunkstore.Backend, error) {
	s3cfg := cfg.System.Backups.Repository.S3
	if !s3cfg.Enabled() {
		return local(cfg.BackupRepositoryPath())
	}
	b, err := s3backend.FromConfig(s3cfg)
	if err != nil {
		return nil, fmt.Errorf("system.backups.repository.s3: %w", err)
	}
	if err := b.Check(ctx); err != nil {
		return nil, fmt.Errorf("system.backups.repository.s3: the bucket does not answer: %w", err)
	}
	return b, nil
}
