package backup

import (
	"context"
	"os"
	"time"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/config"
)

// repositoryOpenTimeout bounds the first answer of a bucket, so that a
// bucket that cannot be reached fails the backup instead of hanging it.
const repositoryOpenTimeout = 2 * time.Minute

// repositoryKey names the repository cfg points at: its bucket when
// system.backups.repository.s3 is set, else its directory. An open store is
// reused while the key stays the same.
func repositoryKey(cfg *config.Config) string {
	s3 := cfg.System.Backups.Repository.S3
	if s3.Enabled() {
		return "s3\x00" + s3.Endpoint + "\x00" + s3.Bucket + "\x00" + s3.Prefix
	}
	return cfg.BackupRepositoryPath()
}

// openRepository opens the repository of cfg over the backend
// RepositoryBackend chooses; errors name the configuration key at fault.
func openRepository(cfg *config.Config) (*chunkstore.Store, error) {
	if !cfg.System.Backups.Repository.S3.Enabled() {
		return chunkstore.Open(cfg.BackupRepositoryPath())
	}
	ctx, cancel := context.WithTimeout(context.Background(), repositoryOpenTimeout)
	defer cancel()
	b, err := RepositoryBackend(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	return chunkstore.OpenBackend(ctx, b)
}

// OpenRepositoryReadOnly opens the repository cfg points at (its bucket or
// its directory) for reading beside a running daemon: wharf backups export
// and verify. It changes nothing and never creates a repository.
func OpenRepositoryReadOnly(cfg *config.Config) (*chunkstore.Store, error) {
	if !cfg.System.Backups.Repository.S3.Enabled() {
		return chunkstore.OpenExisting(cfg.BackupRepositoryPath())
	}
	ctx, cancel := context.WithTimeout(context.Background(), repositoryOpenTimeout)
	defer cancel()
	b, err := RepositoryBackend(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	return chunkstore.OpenExistingBackend(ctx, b)
}

// repositoryMayExist is false when there is surely no repository to read:
// no directory for a local one (a bucket is asked when opened).
func repositoryMayExist(cfg *config.Config) bool {
	if cfg.System.Backups.Repository.S3.Enabled() {
		return true
	}
	_, err := os.Stat(cfg.BackupRepositoryPath())
	return err == nil
}
