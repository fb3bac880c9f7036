package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/wharf/wharf/internal/ids"
	"github.com/wharf/wharf/internal/server"
)

// maxJSONBody bounds small JSON request bodies.
const maxJSONBody = 1 << 20

// readJSON reads a JSON body into v; a body it cannot read is a 400.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err := dec.Decode(v); err != nil {
		return badBody(err)
	}
	return nil
}

type powerRequest struct {
	Action      string `json:"action"`
	WaitSeconds *int   `json:"wait_seconds"`
}

func (a *API) postPower(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req powerRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	action, err := server.ParsePowerAction(req.Action)
	if err != nil {
		return err
	}
	wait := 30
	if req.WaitSeconds != nil {
		wait = *req.WaitSeconds
	}
	if wait < 0 || wait > 300 {
		return errBadWait
	}
	if err := s.PowerAsync(action, time.Duration(wait)*time.Second); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

type commandsRequest struct {
	Commands []string `json:"commands"`
}

func (a *API) postCommands(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req commandsRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if !s.State().IsRunning() {
		return server.ErrNotRunning
	}
	for _, c := range req.Commands {
		if err := s.SendCommand(c); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type logsResponse struct {
	Data []string `json:"data"`
}

func (a *API) getLogs(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	size := 100
	if v := r.URL.Query().Get("size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return errBadSize
		}
		if n > 0 && n < 100 {
			size = n
		}
	}
	writeJSON(w, http.StatusOK, logsResponse{Data: s.ConsoleLines(size)})
	return nil
}

func (a *API) postInstall(reinstall bool) serverHandler {
	return func(w http.ResponseWriter, r *http.Request, s *server.Server) error {
		if err := s.InstallAsync(reinstall); err != nil {
			return err
		}
		w.WriteHeader(http.StatusAccepted)
		return nil
	}
}

func (a *API) postSync(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	if err := s.Sync(r.Context()); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) deleteServer(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	if err := a.Servers.Delete(r.Context(), s); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type createRequest struct {
	UUID              string `json:"uuid"`
	StartOnCompletion bool   `json:"start_on_completion"`
}

func (a *API) postServers(w http.ResponseWriter, r *http.Request) error {
	var req createRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if !ids.IsUUID(req.UUID) {
		return errBadUUID
	}
	if _, err := a.Servers.Create(r.Context(), req.UUID, req.StartOnCompletion); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}
