package httpapi

import (
	"net/http"

	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/ids"
	"github.com/wharf/wharf/internal/server"
)

type backupRequest struct {
	Adapter string `json:"adapter"`
	UUID    string `json:"uuid"`
	Ignore  string `json:"ignore"`
}

// postBackup starts a backup: 202 at once, the outcome goes to the backend
// and to the websocket.
func (a *API) postBackup(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req backupRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if !ids.IsUUID(req.UUID) {
		return errBadUUID
	}
	adapter, err := backup.ParseAdapter(req.Adapter)
	if err != nil {
		return err
	}
	if err := a.Backups.Create(s, adapter, req.UUID, req.Ignore); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

type restoreRequest struct {
	Adapter           string `json:"adapter"`
	TruncateDirectory bool   `json:"truncate_directory"`
	DownloadURL       string `json:"download_url"`
}

// postRestore checks the request (404 for a missing local backup, 400 for
// a refused download) and restores in the background (202).
func (a *API) postRestore(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	id := r.PathValue("backup")
	if !ids.IsUUID(id) {
		return backup.ErrBadUUID
	}
	var req restoreRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	adapter, err := backup.ParseAdapter(req.Adapter)
	if err != nil {
		return err
	}
	err = a.Backups.Restore(r.Context(), s, id, backup.RestoreRequest{
		Adapter: adapter, TruncateDirectory: req.TruncateDirectory, DownloadURL: req.DownloadURL,
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// deleteBackup removes a local backup: 204, or 404 when absent.
func (a *API) deleteBackup(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	if err := a.Backups.Delete(s, r.PathValue("backup")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
