package backup

import (
	"sync/atomic"

	"github.com/wharf/wharf/internal/chunkstore"
)

// browseState is what the backups folder asks of every file request: the
// repository open now, read without waiting for repoMu (which an opening
// of a bucket holds for up to repositoryOpenTimeout).
type browseState struct {
	open    atomic.Pointer[openRepo]
	opening atomic.Bool // a bucket is being opened for the folder
}

type openRepo struct {
	st  *chunkstore.Store
	key string // repositoryKey
}

// BrowseSource is the backups folder's source (backupview.Source, issue
// 35): the node's repository and the folder's name while browsing is on
// and new local backups go to a repository that exists; nil otherwise.
// A directory repository not open yet is opened here (a local open reads
// its index: fast); a bucket is opened in the background, so that a file
// request never waits on an unreachable store: the folder shows once it
// is open.
func (s *Service) BrowseSource() (*chunkstore.Store, string) {
	cfg := s.cfg.Get()
	if !cfg.BrowseBackups() || !repositoryMayExist(cfg) {
		return nil, ""
	}
	dir := cfg.System.Backups.BrowseDirectory
	if o := s.browse.open.Load(); o != nil && o.key == repositoryKey(cfg) {
		return o.st, dir
	}
	if !cfg.System.Backups.Repository.S3.Enabled() {
		if st := s.existingRepository(cfg); st != nil {
			return st, dir
		}
		return nil, ""
	}
	if s.ctx.Err() == nil && s.browse.opening.CompareAndSwap(false, true) {
		s.wg.Go(func() {
			defer s.browse.opening.Store(false)
			s.existingRepository(cfg)
		})
	}
	return nil, ""
}
