package httpapi

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/wharf/wharf/internal/backup"
)

// retryAfterDownloads is the Retry-After of a download refused by
// system.backups.downloads' caps (429, 503): a slot is freed when a
// download ends, which nothing predicts; a few seconds is a polite pace.
const retryAfterDownloads = "10"

// sendRepositoryBackup streams the tar.gz of a repository backup, generated
// as it is sent (docs/security.md, "Repository backup downloads"): within
// the caps of system.backups.downloads, ending when the client goes away
// (the request's context) or stops taking bytes for stall_timeout seconds.
func (a *API) sendRepositoryBackup(w http.ResponseWriter, r *http.Request, server, id string) error {
	rc, err := a.Backups.OpenRepositoryDownload(r.Context(), server, id)
	if errors.Is(err, backup.ErrServerDownloads) || errors.Is(err, backup.ErrNodeDownloads) {
		w.Header().Set("Retry-After", retryAfterDownloads)
	}
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Disposition", attachment("backup-"+id+".tar.gz"))
	w.Header().Set("Content-Type", "application/octet-stream")
	stall := time.Duration(a.Config.Get().System.Backups.Downloads.StallTimeout) * time.Second
	out := &stallBound{w: w, rc: http.NewResponseController(w), d: stall}
	_, err = io.Copy(out, rc)
	if err == nil {
		err = out.flush()
	}
	if err != nil {
		// Cut the connection: a truncated body must not look whole. A
		// client that went away or stalled is not the node's failure.
		if out.failed || r.Context().Err() != nil {
			a.Log.Info("backup download ended by its client", "backup", id, "error", err)
		} else {
			a.Log.Error("backup download failed", "backup", id, "error", err)
		}
		panic(http.ErrAbortHandler)
	}
	return nil
}

// stallBound writes to the client with a deadline of d for each write:
// a client that takes no byte for d ends the download (net/http's server
// has no write timeout: a long download must not have one).
type stallBound struct {
	w      io.Writer
	rc     *http.ResponseController
	d      time.Duration
	failed bool // a write to the client failed
}

func (s *stallBound) Write(p []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.d))
	n, err := s.w.Write(p)
	if err != nil {
		s.failed = true
	}
	return n, err
}

// flush sends what the response buffers within the deadline, then lifts
// it for the rest of the connection's life (keep-alive).
func (s *stallBound) flush() error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.d))
	if err := s.rc.Flush(); err != nil {
		s.failed = true
		return err
	}
	return s.rc.SetWriteDeadline(time.Time{})
}
