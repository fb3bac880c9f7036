package backup

import (
	"context"
	"io"
	"sync"

	"github.com/wharf/wharf/internal/usererr"
)

// The answers beyond system.backups.downloads' caps.
var (
	ErrServerDownloads = usererr.New(usererr.TooMany, "Too many downloads of this server's backups are in progress; try again when one has finished.")
	ErrNodeDownloads   = usererr.New(usererr.Busy, "Too many backup downloads are in progress on this node; try again later.")
)

// downloadSlots counts the repository downloads running, per server and
// on the node.
type downloadSlots struct {
	mu        sync.Mutex
	node      int
	perServer map[string]int
}

// take holds a slot of server within the caps, or says which is full.
func (d *downloadSlots) take(server string, maxServer, maxNode int) (release func(), err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.perServer[server] >= maxServer {
		return nil, ErrServerDownloads
	}
	if d.node >= maxNode {
		return nil, ErrNodeDownloads
	}
	if d.perServer == nil {
		d.perServer = map[string]int{}
	}
	d.perServer[server]++
	d.node++
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.node--
			if d.perServer[server]--; d.perServer[server] == 0 {
				delete(d.perServer, server)
			}
		})
	}, nil
}

// OpenRepositoryDownload opens the tar.gz of a repository backup of server
// for a signed download: ErrNotFound when there is none, ErrServerDownloads
// or ErrNodeDownloads beyond system.backups.downloads' caps. Its generation
// ends with ctx (the request's: the client went away). The caller closes
// it, which frees its slot.
func (s *Service) OpenRepositoryDownload(ctx context.Context, server, backup string) (io.ReadCloser, error) {
	lim := s.cfg.Get().System.Backups.Downloads
	release, err := s.downloads.take(server, lim.MaxPerServer, lim.MaxPerNode)
	if err != nil {
		return nil, err
	}
	rc, err := s.OpenRepositoryStream(ctx, server, backup)
	if err != nil {
		release()
		return nil, err
	}
	return &slotted{ReadCloser: rc, release: release}, nil
}

// slotted is a download holding its slot until it is closed.
type slotted struct {
	io.ReadCloser
	release func()
}

func (s *slotted) Close() error {
	err := s.ReadCloser.Close()
	s.release()
	return err
}
