package httpapi

import (
	"net/http"

	"github.com/wharf/wharf/internal/pull"
	"github.com/wharf/wharf/internal/server"
)

// pullEnabled answers 400 when remote downloads are switched off.
func (a *API) pullEnabled(w http.ResponseWriter, r *http.Request) bool {
	if a.Pulls == nil || a.Config.Get().API.DisableRemoteDownload {
		a.fail(w, r, pull.ErrDisabled)
		return false
	}
	return true
}

func (a *API) getPulls(w http.ResponseWriter, r *http.Request, s *server.Server) {
	if !a.pullEnabled(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"downloads": a.Pulls.List(s.UUID())})
}

// postPull starts a remote download: 202 with its identifier, or with
// foreground 200 and the Stat of the file once written.
func (a *API) postPull(w http.ResponseWriter, r *http.Request, s *server.Server) {
	if !a.pullEnabled(w, r) {
		return
	}
	var req pull.Request
	if !decodeJSON(w, r, &req) {
		return
	}
	end, ok := a.fileJob(w, r, s)
	if !ok {
		return
	}
	d, err := a.Pulls.Begin(s.UUID(), s.Files(), req)
	if err != nil {
		end()
		a.fail(w, r, err)
		return
	}
	if !req.Foreground {
		a.Pulls.Start(d, end)
		writeJSON(w, http.StatusAccepted, map[string]string{"identifier": d.ID})
		return
	}
	name, err := a.Pulls.Run(r.Context(), d)
	end()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	st, err := a.fileManager(s).StatOf(name)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (a *API) deletePull(w http.ResponseWriter, r *http.Request, s *server.Server) {
	if !a.pullEnabled(w, r) {
		return
	}
	a.Pulls.Cancel(s.UUID(), r.PathValue("download"))
	w.WriteHeader(http.StatusNoContent)
}
