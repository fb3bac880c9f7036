package backup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
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
// RepositoryBackend chooses and claims it for this node (claimError);
// errors name the configuration key at fault.
func openRepository(cfg *config.Config) (*chunkstore.Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), repositoryOpenTimeout)
	defer cancel()
	var st *chunkstore.Store
	var err error
	if !cfg.System.Backups.Repository.S3.Enabled() {
		st, err = chunkstore.Open(cfg.BackupRepositoryPath())
	} else {
		var b chunkstore.Backend
		if b, err = RepositoryBackend(ctx, cfg, nil); err != nil {
			return nil, err
		}
		// Claimed before the index is read: a refused node reads nothing.
		if err := claimError(cfg, claimBackend(ctx, cfg, b)); err != nil {
			return nil, err
		}
		if st, err = chunkstore.OpenBackend(ctx, b); err != nil {
			return nil, err
		}
		return st, shareRepository(ctx, cfg, st)
	}
	if err != nil {
		return nil, err
	}
	if cfg.System.Backups.Repository.Shared {
		err = st.ClaimShared(ctx, cfg.UUID)
	} else {
		err = st.Claim(ctx, cfg.UUID)
	}
	if err := claimError(cfg, err); err != nil {
		return nil, err
	}
	return st, shareRepository(ctx, cfg, st)
}

// claimBackend claims the repository in b for this node: shared
// (system.backups.repository.shared, issue 36) or for it alone.
func claimBackend(ctx context.Context, cfg *config.Config, b chunkstore.Backend) error {
	if cfg.System.Backups.Repository.Shared {
		return chunkstore.ClaimSharedBackend(ctx, b, cfg.UUID)
	}
	return chunkstore.ClaimBackend(ctx, b, cfg.UUID)
}

// shareRepository turns on the leases of a shared repository and makes
// sure it has an id (RepositoryID).
func shareRepository(ctx context.Context, cfg *config.Config, st *chunkstore.Store) error {
	if !cfg.System.Backups.Repository.Shared {
		return nil
	}
	st.SetShared(cfg.UUID)
	if ms := cfg.Testing.RepositoryLeaseTTLMS; ms > 0 {
		// End-to-end tests only (config.Testing): short leases, one clock.
		st.SetLeaseTiming(time.Duration(ms)*time.Millisecond, 0)
	}
	if _, err := st.RepositoryID(ctx, true); err != nil {
		return fmt.Errorf("%s: %w", repositorySetting(cfg), err)
	}
	return nil
}

// claimError is the error of a claim of the repository for this node
// (chunkstore.Claim): one another node uses is refused with an error
// naming the setting, since two nodes' garbage collections destroy each
// other's backups (issue 33 item 10).
func claimError(cfg *config.Config, err error) error {
	var shared *chunkstore.SharedError
	if !errors.As(err, &shared) {
		return err
	}
	return fmt.Errorf("%s: %w", repositorySetting(cfg), &SharedRepositoryError{Shared: shared})
}

// repositorySetting names the setting that chose the repository, with
// its value.
func repositorySetting(cfg *config.Config) string {
	if s3 := cfg.System.Backups.Repository.S3; s3.Enabled() {
		return fmt.Sprintf("system.backups.repository.s3 (bucket %q, prefix %q)", s3.Bucket, s3.Prefix)
	}
	return fmt.Sprintf("system.backups.repository.path (%s)", cfg.BackupRepositoryPath())
}

// SharedRepositoryError is a repository another node claimed.
type SharedRepositoryError struct{ Shared *chunkstore.SharedError }

func (e *SharedRepositoryError) Error() string {
	if e.Shared.Exclusive {
		return fmt.Sprintf("another node (%s) uses this backup repository without sharing it (system.backups.repository.shared is false there), "+
			"and its garbage collection would destroy this node's backups: set system.backups.repository.shared: true on every node "+
			"that uses the repository", strings.Join(e.Shared.Others, ", "))
	}
	return fmt.Sprintf("another node (%s) uses this backup repository, and two nodes on one repository destroy each other's backups: "+
		"give each node its own bucket or prefix (or directory); this node backs up into it only when the other's object is gone "+
		"(delete it only if that node no longer uses the repository)", strings.Join(e.Shared.Others, ", "))
}

func (e *SharedRepositoryError) Unwrap() error { return e.Shared }

// RepositoryClaims lists the node claims of the repository cfg points at
// (wharf diagnostics): object names, nodes/<node uuid>.
func RepositoryClaims(cfg *config.Config) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), repositoryOpenTimeout)
	defer cancel()
	if !cfg.System.Backups.Repository.S3.Enabled() {
		return chunkstore.Claims(ctx, chunkstore.ExistingLocalBackend(cfg.BackupRepositoryPath()))
	}
	b, err := RepositoryBackend(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	return chunkstore.Claims(ctx, b)
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
