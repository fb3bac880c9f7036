package httpapi

import (
	"context"
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
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if err := a.refuseInView(s, req.Root, req.Directory); err != nil {
		return err
	}
	// A background download outlives the request: its job ends with the
	// server (deleted) and the pull service, not with the client.
	parent := r.Context()
	if !req.Foreground {
		parent = context.WithoutCancel(parent)
	}
	job, err := a.userJob(parent, s, server.JobPull)
	if err != nil {
		return err
	}
	ctx, end := job.Context(), job.End
	d, err := a.Pulls.Begin(s.UUID(), job.FS(), req)
	if err != nil {
		end()
		return err
	}
	if !req.Foreground {
		a.Pulls.Start(ctx, d, end)
		writeJSON(w, http.StatusAccepted, map[string]string{"identifier": d.ID})
		return nil
	}
	name, err := a.Pulls.Run(ctx, d)
	err = workErr(ctx, err)
	end()
	if err != nil {
		return err
	}
	st, err := a.fileReader(s).StatOf(name)
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
