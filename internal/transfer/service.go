package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/atomicfile"
	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/consoletext"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/ids"
	"github.com/wharf/wharf/internal/metrics"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/server"
)

// Defaults of Options.
const (
	DefaultProgressInterval = 5 * time.Second
	DefaultStopWait         = 15 * time.Second
	// reportTimeout bounds the calls that tell the backend how a transfer
	// ended, made after the transfer's own context is gone.
	reportTimeout = 30 * time.Second
)

// Options are what the transfer service drives.
type Options struct {
	Servers *server.Manager
	Panel   *panel.Client
	Config  *config.Store
	// Backups finds the local backups an outgoing transfer carries; none
	// are sent when nil.
	Backups *backup.Service
	Log     *slog.Logger
	// Client sends outgoing transfers; a client without a timeout when nil.
	Client *http.Client
	// ProgressInterval is the period of the `transfer logs` progress
	// messages (DefaultProgressInterval when zero).
	ProgressInterval time.Duration
	// StopWait bounds the wait for a running server to stop before it is
	// sent (DefaultStopWait when zero).
	StopWait time.Duration
	Now      func() time.Time
	// Metrics counts the transfers (the daemon's collectors); nil: not counted.
	Metrics *metrics.Metrics
}

// Service runs the node's outgoing and incoming transfers.
type Service struct {
	opts     Options
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	Outgoing *Registry
	Incoming *Registry
}

// New returns the service; ctx is the node's lifetime.
func New(ctx context.Context, opts Options) *Service {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Client == nil {
		// No timeout: an archive takes as long as it takes. Cancelling the
		// transfer's context ends the request.
		opts.Client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = DefaultProgressInterval
	}
	if opts.StopWait <= 0 {
		opts.StopWait = DefaultStopWait
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ctx, cancel := context.WithCancel(ctx)
	return &Service{opts: opts, ctx: ctx, cancel: cancel, Outgoing: NewRegistry(), Incoming: NewRegistry()}
}

// Close cancels the outgoing transfers and waits for them to end.
func (svc *Service) Close() {
	svc.cancel()
	svc.wg.Wait()
}

func (svc *Service) report(uuid string, successful bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(svc.ctx), reportTimeout)
	defer cancel()
	err := svc.opts.Panel.SetTransferStatus(ctx, uuid, successful)
	if err != nil {
		svc.opts.Log.Error("could not report the end of a transfer to the backend", "server", uuid, "successful", successful, "error", err)
	}
	return err
}

// publisher publishes a transfer's events to the server's subscribers and
// writes them to the daemon log too, without the colours.
func (svc *Service) publisher(s *server.Server, direction string) func(events.Event) {
	log := svc.opts.Log.With("server", s.UUID(), "direction", direction)
	return func(e events.Event) {
		switch e.Name {
		case events.TransferStatus:
			log.Info("transfer status", "status", strings.Join(e.Args, " "))
		case events.TransferLogs:
			log.Info("transfer log", "message", consoletext.StripANSI(strings.Join(e.Args, " ")))
		}
		s.Publish(e)
	}
}

// Send starts an outgoing transfer of s to url (a target's /api/transfers),
// with token as the Authorization header, and returns at once. The server's
// job slot is held (it is seen transferring) until the transfer fails or is
// cancelled; after a completed transfer it stays held, because the server
// now lives on the target (the backend deletes it here). A server busy with
// another job is refused with a *server.BusyError (409). backups are the
// UUIDs of the backups the panel selected to go along (Pelican).
func (svc *Service) Send(s *server.Server, url, token string, backups []string) (*Transfer, error) {
	// The transfer's context is the job's: it ends with the service, the
	// server (deleted) and the job.
	job, err := s.BeginJob(svc.ctx, server.JobTransferOut)
	if err != nil {
		return nil, err
	}
	end := job.End
	t := newTransfer(job.Context(), s.UUID(), svc.publisher(s, "outgoing"))
	t.job = job
	if err := svc.Outgoing.add(t); err != nil {
		end()
		return nil, err
	}
	if err := svc.mark(svc.outgoingDir(), t.server, stageSending); err != nil {
		svc.Outgoing.remove(t)
		t.cancel(err)
		end()
		return nil, fmt.Errorf("recording the transfer: %w", err)
	}
	t.announce()
	svc.wg.Go(func() {
		completed := false
		defer func() {
			if !completed {
				end()
			}
		}()
		completed = svc.runOutgoing(t, s, url, token, backups, end)
	})
	return t, nil
}

// errLiveTransferFailed is what the metrics record for a live transfer that
// did not complete (its cause is already logged and reported).
var errLiveTransferFailed = errors.New("live transfer failed")

// runOutgoing sends the server and reports whether the transfer completed;
// end releases the job slot, on failure before the outcome is announced.
func (svc *Service) runOutgoing(t *Transfer, s *server.Server, url, token string, backups []string, end func()) bool {
	log := svc.opts.Log.With("server", t.server, "direction", "outgoing")
	tl := transferLog{publish: svc.publisher(s, "outgoing"), now: svc.opts.Now}
	tl.msg("Preparing to stream server data to destination...")
	start := time.Now()
	extra := svc.outgoingExtras(s, backups, log)
	// A transfer that would be classic goes by manifest when the target
	// shares the backup repository (bymanifest.go).
	if len(extra.backups) > 0 || !svc.opts.Config.Get().System.Transfers.Live {
		if handled, err := svc.byManifest(t, s, url, token, extra, tl, log, end); handled {
			svc.opts.Metrics.ObserveJob(metrics.TransferOut, err, s.Utilization().DiskBytes, time.Since(start))
			return err == nil
		}
	}
	// The live stream carries the server's files and install log:
	// backups go with the classic form.
	if len(extra.backups) > 0 && svc.opts.Config.Get().System.Transfers.Live {
		log.Info("backups go along: classic transfer", "backups", len(extra.backups))
	} else if svc.opts.Config.Get().System.Transfers.Live {
		if offer, version, ok := svc.negotiate(t.ctx, url, token); ok {
			if repo, shared := svc.liveManifestRepo(t.ctx, offer); shared {
				log.Info("the target shares the backup repository: live transfer by manifest", "repository", repo)
				version = liveManifestVersion
			}
			ok := svc.runLive(t, s, url, token, offer, version, tl, end)
			var result error
			if !ok {
				result = errLiveTransferFailed
			}
			svc.opts.Metrics.ObserveJob(metrics.TransferOut, result, s.Utilization().DiskBytes, time.Since(start))
			return ok
		}
		log.Info("the target does not speak live transfers: classic transfer")
	}
	err := s.StopForJob(t.ctx, svc.opts.StopWait)
	defer func() {
		svc.opts.Metrics.ObserveJob(metrics.TransferOut, err, s.Utilization().DiskBytes, time.Since(start))
	}()
	if err == nil {
		// The stopped container is not needed any more (a start re-creates
		// it), and on a Docker engine shared with the target it would hold
		// the name that the target's container needs.
		if rerr := svc.opts.Servers.RemoveContainer(t.ctx, t.server); rerr != nil {
			log.Warn("could not remove the stopped container before sending", "error", rerr)
		}
	}
	if err == nil && !t.setStatus(Processing) {
		err = context.Cause(t.ctx)
	}
	if err == nil {
		err = svc.stream(t, s, url, token, extra, tl)
	}
	if t.ctx.Err() != nil && err != nil {
		err = context.Cause(t.ctx)
	}
	svc.endOutgoing(t, err, end, tl, log)
	return err == nil
}

// endOutgoing is the outcome of an outgoing transfer, classic or live.
// After a failure (err != nil) it cleans up first: the backend learns of
// the failure, the flag is cleared, the job slot is released (end) and the
// transfer leaves the active list; then the status reaches cancelled or
// failed and the console says so. After a success the flag is cleared and
// the transfer completes; end is left to the caller. attrs go on the log
// line. It returns the status reached and the failure report's error.
func (svc *Service) endOutgoing(t *Transfer, err error, end func(), tl transferLog, log *slog.Logger, attrs ...any) (Status, error) {
	if err == nil {
		svc.unmark(svc.outgoingDir(), t.server)
		svc.Outgoing.remove(t)
		status := t.finish(nil)
		tl.msg("Finished streaming archive to destination.")
		log.Info("transfer completed", attrs...)
		return status, nil
	}
	rerr := svc.report(t.server, false)
	svc.unmark(svc.outgoingDir(), t.server)
	end()
	svc.Outgoing.remove(t)
	status := t.finish(err)
	switch status {
	case Cancelled:
		tl.msg("Transfer cancelled.")
		log.Info("transfer cancelled", attrs...)
	case Completed:
		// The target confirmed while the error was being handled.
	default:
		tl.msg("Transfer failed: " + err.Error())
		log.Warn("transfer failed", append([]any{"error", err}, attrs...)...)
	}
	return status, rerr
}

// stream pushes the archive, publishing progress every ProgressInterval.
func (svc *Service) stream(t *Transfer, s *server.Server, url, token string, extra outgoing, tl transferLog) error {
	total := s.Utilization().DiskBytes
	if total <= 0 {
		if n, err := s.Files().RefreshUsage(t.ctx); err == nil {
			total = n
		}
	}
	var read atomic.Int64
	tl.msg("Streaming archive to destination...")
	stopProgress := svc.everyProgressInterval(func() { tl.msg("Uploading " + progressBar(read.Load(), total)) })
	level := archive.ParseLevel(svc.opts.Config.Get().System.Backups.CompressionLevel)
	extra.onBackup = func(n int, id string) {
		tl.msg(fmt.Sprintf("Streaming backup %d/%d to destination: %s", n, len(extra.backups), id))
	}
	err := push(t.ctx, svc.opts.Client, url, token, s.Files().Trusted(), level, func(p archive.Progress) { read.Store(p.Input) }, extra)
	stopProgress()
	if err == nil {
		tl.msg("Uploading " + progressBar(read.Load(), max(total, read.Load())))
	}
	return err
}

// outgoingExtras finds the selected backups that are local to this node
// and the server's install log. A backup in this node's repository goes as
// the tar.gz its signed download serves, generated while it is sent; the
// target stores it as an archive backup, which a target in either format
// restores (Restore looks for an archive file first). A selected backup not
// found here (one in an object store, or gone) is skipped with a log line,
// as Pelican Wings' source sends only the archives it finds.
func (svc *Service) outgoingExtras(s *server.Server, backups []string, log *slog.Logger) outgoing {
	extra := outgoing{installLog: installLogPath(svc.opts.Config.Get().System.LogDirectory, s.UUID())}
	for _, id := range backups {
		if svc.opts.Backups == nil {
			break
		}
		path, err := svc.opts.Backups.Locate(s, id)
		if errors.Is(err, backup.ErrNotFound) {
			if err = svc.opts.Backups.InRepository(s.UUID(), id); err == nil {
				log.Info("a backup selected for the transfer is in the repository; sent as an archive generated from it", "backup", id)
				extra.backups = append(extra.backups, localBackup{id: id, open: svc.repositoryStream(s.UUID(), id)})
				continue
			}
		}
		if err != nil {
			log.Info("a backup selected for the transfer is not on this node; not sent", "backup", id, "error", err)
			continue
		}
		extra.backups = append(extra.backups, localBackup{id: id, path: path})
	}
	return extra
}

// repositoryStream opens a repository backup's tar.gz when it is sent.
func (svc *Service) repositoryStream(server, id string) func(context.Context) (io.ReadCloser, error) {
	return func(ctx context.Context) (io.ReadCloser, error) {
		return svc.opts.Backups.OpenRepositoryStream(ctx, server, id)
	}
}

// everyProgressInterval calls report every ProgressInterval until the
// returned stop is called; stop waits for the reporting goroutine to end.
func (svc *Service) everyProgressInterval(report func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(svc.opts.ProgressInterval)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				report()
			case <-done:
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// Receive runs an incoming transfer of server id, reading the source's form
// from mr. The server is registered before the archive is read (so it can
// be queried and cancelled while it streams); on any failure everything
// created here is removed and the backend is told. unblock, when set, is
// called on a cancel to break a read that waits on the network.
func (svc *Service) Receive(ctx context.Context, id string, mr *multipart.Reader, unblock func()) error {
	return svc.receiveWith(ctx, id, unblock, func(t *Transfer, job *server.Job) error { return svc.fill(t, job, mr) })
}

// receiveWith runs an incoming transfer whose files fill writes (from a
// classic form or a live stream).
func (svc *Service) receiveWith(ctx context.Context, id string, unblock func(), fill func(*Transfer, *server.Job) error) error {
	t := newTransfer(ctx, id, nil)
	if err := svc.Incoming.add(t); err != nil {
		return err
	}
	defer svc.Incoming.remove(t)
	if _, ok := svc.opts.Servers.Get(id); ok {
		// Not ours to clean up or to report: the server lives here already.
		t.finish(server.ErrExists)
		return server.ErrExists
	}
	if unblock != nil {
		stop := context.AfterFunc(t.ctx, func() {
			if errors.Is(context.Cause(t.ctx), ErrCancelled) {
				unblock()
			}
		})
		defer stop()
	}
	log := svc.opts.Log.With("server", id, "direction", "incoming")
	if err := svc.mark(svc.markerDir(), id, stageReceiving); err != nil {
		t.finish(err)
		return err
	}
	start := time.Now()
	s, end, err := svc.receive(t, id, fill)
	if end != nil {
		defer end()
	}
	if err == nil {
		// The server is whole: its transfer job ends before the panel is
		// told, so that the panel's next action on it (a restore of a backup
		// that came along, a start) does not find it still being transferred.
		end()
		err = svc.report(id, true)
	}
	defer func() {
		var received int64
		if s != nil {
			received = s.Files().Usage() // what was written through its sandbox
		}
		svc.opts.Metrics.ObserveJob(metrics.TransferIn, err, received, time.Since(start))
	}()
	switch {
	case err == nil:
	case errors.Is(context.Cause(t.ctx), ErrCancelled):
		err = ErrCancelled
	case ctx.Err() != nil:
		// The request's context ends when the source's connection breaks.
		err = fmt.Errorf("%w: %w", ErrSourceGone, err)
	}
	if err != nil {
		if s != nil {
			if cur, ok := svc.opts.Servers.Get(id); ok && cur == s {
				t.finish(err) // published to the server's subscribers before it goes
				cctx, cancel := server.CleanupContext(svc.ctx)
				if derr := svc.opts.Servers.Delete(cctx, s); derr != nil {
					log.Warn("removing the half-received server", "error", derr)
				}
				cancel()
			}
		} else {
			_ = os.RemoveAll(svc.dataDir(id))
		}
		t.finish(err)
		_ = svc.report(id, false)
		svc.unmark(svc.markerDir(), id)
		log.Warn("incoming transfer failed", "error", err, "status", t.Status())
		return refused(err)
	}
	svc.unmark(svc.markerDir(), id)
	end()
	t.finish(nil)
	log.Info("incoming transfer completed")
	return nil
}

// receive registers the server, holding its job slot (end releases it),
// and fills it.
func (svc *Service) receive(t *Transfer, id string, fill func(*Transfer, *server.Job) error) (s *server.Server, end func(), err error) {
	res, err := svc.opts.Panel.ServerConfiguration(t.ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("fetching the server configuration: %w", err)
	}
	def, err := server.DefinitionFromPanel(res, svc.opts.Config.Get().System.CrashDetection.Enabled)
	if err != nil {
		return nil, nil, err
	}
	if def.Config.UUID != id {
		return nil, nil, fmt.Errorf("the backend answered with the configuration of another server")
	}
	s, err = svc.opts.Servers.Add(def)
	if err != nil {
		return nil, nil, err
	}
	// A new server: its slot is free. The job's context ends with the
	// transfer's.
	job, err := s.BeginJob(t.ctx, server.JobTransferIn)
	if err != nil {
		return s, nil, err
	}
	end = job.End
	t.setPublisher(svc.publisher(s, "incoming"))
	t.announce()
	if !t.setStatus(Processing) {
		return s, end, context.Cause(t.ctx)
	}
	return s, end, fill(t, job)
}

// fill extracts the archive into the registered server, through its
// transfer job, and creates its container.
func (svc *Service) fill(t *Transfer, job *server.Job, mr *multipart.Reader) error {
	s := job.Server()
	cfg := svc.opts.Config.Get()
	opts := archive.ExtractOptions{
		WriteLimit: int64(cfg.System.Transfers.DownloadLimit) * 1024 * 1024,
		TempDir:    cfg.System.TmpDirectory,
	}
	extra := newExtras(cfg.System.BackupDirectory, svc.opts.Log)
	extra.layout = cfg.System.Backups.Layout
	extra.snapshot = svc.extractorFor(t.server)
	extra.server = t.server
	if svc.opts.Backups != nil {
		extra.adopter = svc.opts.Backups
	}
	extra.setBounds(cfg.System.Transfers.MaxBackups, cfg.System.Transfers.MaxBackupSize, s.Files().DiskLimit())
	defer extra.discard()
	if err := receive(job.Context(), mr, job.FS().Trusted(), opts, extra); err != nil {
		return err
	}
	if err := svc.mark(svc.markerDir(), t.server, stageContainer); err != nil {
		return err
	}
	if err := s.CreateContainer(t.ctx); err != nil {
		return fmt.Errorf("creating the container: %w", err)
	}
	return extra.commit(t.ctx, t.server, cfg.System.LogDirectory)
}

// Stages recorded in the marker of a transfer.
const (
	stageReceiving = "receiving" // incoming
	stageContainer = "container" // incoming
	stageSending   = "sending"   // outgoing
)

// markerDir holds the markers of the incoming transfers.
func (svc *Service) markerDir() string {
	return filepath.Join(svc.opts.Config.Get().System.RootDirectory, "transfers")
}

// outgoingDir holds the markers of the outgoing transfers.
func (svc *Service) outgoingDir() string {
	return filepath.Join(svc.markerDir(), "outgoing")
}

func (svc *Service) dataDir(id string) string {
	return filepath.Join(svc.opts.Config.Get().System.Data, id)
}

// mark records a transfer on disk (in markerDir or outgoingDir), so that a
// daemon killed in the middle cleans up after it at the next boot.
func (svc *Service) mark(dir, id, stage string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, id), []byte(stage), 0o600)
}

func (svc *Service) unmark(dir, id string) {
	if err := os.Remove(filepath.Join(dir, id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		svc.opts.Log.Warn("could not remove a transfer marker", "server", id, "error", err)
	}
}

// CleanupStale clears what the transfers interrupted by the end of the
// previous daemon process (kill -9, crash, power loss) left behind. It runs
// at boot, after the servers are loaded and before the API serves.
//
// An incoming transfer's files are removed, and its container when one was
// created; a server the backend assigns to this node is kept.
//
// For an outgoing transfer, the backend is told that it failed, unless the
// backend no longer assigns the server to this node (the target reported
// success first). The server itself needs nothing: its job slot lives in
// memory and is free after a restart, and the source's files
// were only read. Without this report, a transfer whose target never heard
// of the failure (the source died before or while connecting) would stay
// in progress on the panel forever.
func (svc *Service) CleanupStale(ctx context.Context) {
	svc.cleanupIncoming(ctx)
	svc.failOutgoing()
}

// markers lists the server UUIDs that have a marker in dir.
func (svc *Service) markers(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			svc.opts.Log.Warn("could not read the transfer markers", "directory", dir, "error", err)
		}
		return nil
	}
	var found []string
	for _, e := range entries {
		id := e.Name()
		if ids.IsUUID(id) && e.Type().IsRegular() {
			found = append(found, id)
		}
	}
	return found
}

func (svc *Service) failOutgoing() {
	for _, id := range svc.markers(svc.outgoingDir()) {
		log := svc.opts.Log.With("server", id, "direction", "outgoing")
		if _, ok := svc.opts.Servers.Get(id); !ok {
			log.Info("an interrupted outgoing transfer's server is no longer assigned to this node; nothing to report")
			svc.unmark(svc.outgoingDir(), id)
			continue
		}
		log.Warn("an outgoing transfer was interrupted by the end of the previous daemon process; telling the backend it failed")
		ctx, cancel := context.WithTimeout(context.WithoutCancel(svc.ctx), reportTimeout)
		err := svc.opts.Panel.SetTransferStatus(ctx, id, false)
		cancel()
		var rerr *panel.RequestError
		switch {
		case err == nil:
		case errors.As(err, &rerr) && rerr.Status < 500:
			// The panels answer 409 when the transfer already ended
			// (the target reported the failure first).
			log.Info("the backend no longer has the transfer in progress", "status", rerr.Status)
		default:
			log.Error("could not report the interrupted transfer to the backend", "error", err)
		}
		svc.unmark(svc.outgoingDir(), id)
	}
}

func (svc *Service) cleanupIncoming(ctx context.Context) {
	for _, id := range svc.markers(svc.markerDir()) {
		stage, _ := os.ReadFile(filepath.Join(svc.markerDir(), id))
		if _, ok := svc.opts.Servers.Get(id); ok {
			svc.opts.Log.Info("an interrupted incoming transfer's server is assigned to this node; keeping it", "server", id)
			svc.unmark(svc.markerDir(), id)
			continue
		}
		svc.opts.Log.Warn("removing what an interrupted incoming transfer left", "server", id)
		if string(stage) == stageContainer {
			if err := svc.opts.Servers.RemoveContainer(ctx, id); err != nil {
				svc.opts.Log.Warn("could not remove the container of an interrupted transfer", "server", id, "error", err)
				continue
			}
		}
		if err := os.RemoveAll(svc.dataDir(id)); err != nil {
			svc.opts.Log.Warn("could not remove the files of an interrupted transfer", "server", id, "error", err)
			continue
		}
		svc.unmark(svc.markerDir(), id)
	}
}
