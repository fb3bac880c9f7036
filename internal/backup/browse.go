package backup

import "github.com/wharf/wharf/internal/chunkstore"

// BrowseSource is the backups folder's source (backupview.Source, issue
// 35): the node's repository and the folder's name while browsing is on
// and new local backups go to a repository that exists; nil otherwise.
func (s *Service) BrowseSource() (*chunkstore.Store, string) {
	cfg := s.cfg.Get()
	if !cfg.BrowseBackups() {
		return nil, ""
	}
	st := s.existingRepository(cfg)
	if st == nil {
		return nil, ""
	}
	return st, cfg.System.Backups.BrowseDirectory
}
