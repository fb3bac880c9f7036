// Package backup creates, restores and deletes server backups: the local
// adapter keeps the archive in the backup directory, the object_store
// adapter uploads it in parts to presigned URLs handed out by the backend.
package backup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/metrics"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/usererr"
)

// Adapter is where a backup lives.
type Adapter string

// The adapters of the spec.
const (
	Local       Adapter = "local"
	ObjectStore Adapter = "object_store"
)

// Errors a user may see, with the messages the HTTP layer answers.
var (
	ErrBadAdapter  = usererr.New(usererr.Invalid, "The backup adapter must be one of local or object_store.")
	ErrBadUUID     = usererr.New(usererr.Invalid, "The backup identifier must be a valid UUID.")
	ErrNotFound    = usererr.New(usererr.NotFound, "The requested backup was not found on this server.")
	ErrNoURL       = usererr.New(usererr.Invalid, "The download_url field is required when the backup adapter is set to object_store.")
	ErrBadDownload = errors.New("the backup could not be downloaded")
)

// DownloadError is a refused restore download (400): bad URL, refused
// address, status or content type. Its message never holds the URL's query.
type DownloadError struct{ Reason string }

func (e *DownloadError) Error() string { return "The backup could not be downloaded: " + e.Reason }

// Unwrap gives ErrBadDownload and the user-visible error (400) that shows
// the reason.
func (e *DownloadError) Unwrap() []error {
	return []error{ErrBadDownload, usererr.New(usererr.Invalid, e.Error())}
}

// ParseAdapter accepts the spec's values and the older spellings (wings,
// s3).
func ParseAdapter(s string) (Adapter, error) {
	switch strings.TrimSpace(s) {
	case "local", "wings":
		return Local, nil
	case "object_store", "s3":
		return ObjectStore, nil
	}
	return "", ErrBadAdapter
}

// Server is what a backup needs of a server (*server.Server).
type Server interface {
	UUID() string
	// Files is the read-only view of the server's files (what a backup
	// reads).
	Files() sandbox.ReadOnly
	Publish(events.Event)
	// BeginJob claims the server's job slot: a restore is exclusive, a
	// backup shared; a refusal is a *server.BusyError (409). The job's
	// context ends with ctx, at its End, and with the server; its FS is
	// the only writable door to the server's files (a restore writes
	// through it).
	BeginJob(ctx context.Context, j server.JobKind, also ...context.Context) (*server.Job, error)
	StopForJob(ctx context.Context, wait time.Duration) error
}

// Service runs backups and restores. Every job is a goroutine of the
// service, stopped and waited for by Close.
type Service struct {
	cfg     *config.Store
	panel   *panel.Client
	log     *slog.Logger
	metrics *metrics.Metrics // nil: jobs are not counted
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	running map[string]bool // backup UUIDs being made
	// transfers are the holds of the transfer snapshots this node's
	// running transfers use, by "<server>/<name>" (repository_transfer.go).
	transfers map[string]*chunkstore.TransferHold

	repoMu sync.Mutex
	repo   *chunkstore.Store // system.backups.format: repository (repository.go)
	// repoKey names the repository repo is (repositoryKey).
	repoKey string
	// repoFilesRead, in tests, is told the files a repository backup read.
	repoFilesRead func([]string)
	gcRunning     bool
	gcAgain       bool
	downloads     downloadSlots // signed repository downloads running (downloads.go)
	browse        browseState   // the backups folder's repository (browse.go)
}

// New returns a service; ctx is the node's lifetime.
func New(ctx context.Context, cfg *config.Store, p *panel.Client, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(ctx)
	return &Service{cfg: cfg, panel: p, log: log, ctx: ctx, cancel: cancel, running: map[string]bool{},
		transfers: map[string]*chunkstore.TransferHold{}}
}

// WithMetrics counts the service's backups and restores in m (the
// daemon's collectors); call it before the first job.
func (s *Service) WithMetrics(m *metrics.Metrics) *Service {
	s.metrics = m
	return s
}

// Close cancels every job and waits for them, then for the repository's
// own goroutines.
func (s *Service) Close() {
	s.cancel()
	s.wg.Wait()
	s.repoMu.Lock()
	defer s.repoMu.Unlock()
	if s.repo != nil {
		s.repo.Close()
	}
}

// tempPrefix starts the names of archives being written in the backup
// directory; CleanTemporaries removes what a crash left.
const tempPrefix = ".wharf-partial-"

func (s *Service) dir() string { return s.cfg.Get().System.BackupDirectory }

// CleanTemporaries removes partial archives left by a crash (at boot).
func (s *Service) CleanTemporaries() {
	// Opening the repository clears its temporary chunks; a GC then
	// removes the chunks of a backup or delete a crash interrupted.
	if st := s.existingRepository(s.cfg.Get()); st != nil {
		s.scheduleGC(st)
	}
	entries, err := os.ReadDir(s.dir())
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			if err := os.Remove(filepath.Join(s.dir(), e.Name())); err == nil {
				s.log.Info("removed a partial backup archive left by a crash", "file", e.Name())
			}
		}
	}
}

// Locate returns the path of a local backup of srv in either layout, or
// ErrNotFound (also when it belongs to another server): see LocalPath.
func (s *Service) Locate(srv Server, backup string) (string, error) {
	return LocalPath(s.cfg.Get(), srv.UUID(), backup)
}

// Delete removes a local backup of srv.
func (s *Service) Delete(srv Server, backup string) error {
	cfg := s.cfg.Get()
	p, err := LocalPath(cfg, srv.UUID(), backup)
	if errors.Is(err, ErrNotFound) {
		st, _, rerr := s.repoManifest(cfg, srv.UUID(), backup)
		if rerr != nil {
			return rerr
		}
		if err := st.Delete(srv.UUID(), backup); err != nil {
			if errors.Is(err, chunkstore.ErrNotFound) {
				return ErrNotFound
			}
			return err
		}
		s.scheduleGC(st)
		return nil
	}
	if err != nil {
		return err
	}
	return removeLocal(cfg, p, backup)
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
