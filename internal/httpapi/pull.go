package httpapi

import (
	"net/http"

	"github.com/wharf/wharf/internal/pull"
	"github.com/wharf/wharf/internal/server"
)

// pullEnabled refuses with 400 when remote downloads are switched off.
func (a *API) pullEnabled() error {
	if a.Pulls == nil || a.Config.Get().API.DisableRemoteDownload {
		return pull.ErrDisabled
	}
	return nil
}

func (a *API) getPulls(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	if err := a.pullEnabled(); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"downloads": a.Pulls.List(s.UUID())})
	return nil
}

// postPull starts a remote download: 202 with its identifier, or with
// foreground 200 and the Stat of the file once written.
func (a *API) postPull(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	if err := a.pullEnabled(); err != nil {
		return err
	}
	var req pull.Request
	ctx, end, err := a.fileJob(w, r, s, &req)
	if err != nil {
		return err
	}
	d, err := a.Pulls.Begin(s.UUID(), s.Files(), req)
	if err != nil {
		end()
		return err
	}
	if !req.Foreground {
		a.Pulls.Start(d, end)
		writeJSON(w, http.StatusAccepted, map[string]string{"identifier": d.ID})
		return nil
	}
	name, err := a.Pulls.Run(ctx, d)
	end()
	if err != nil {
		return err
	}
	st, err := a.fileManager(s).StatOf(name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (a *API) deletePull(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	if err := a.pullEnabled(); err != nil {
		return err
	}
	a.Pulls.Cancel(s.UUID(), r.PathValue("download"))
	w.WriteHeader(http.StatusNoContent)
	return nil
}
