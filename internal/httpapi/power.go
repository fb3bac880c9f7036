package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/wharf/wharf/internal/server"
)

// maxJSONBody bounds small JSON request bodies.
const maxJSONBody = 1 << 20

// decodeJSON reads a JSON body into v; it answers 400 itself on failure.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err := dec.Decode(v); err != nil {
		writeError(w, r, http.StatusBadRequest, "The data passed in the request was not in a parsable format: "+err.Error())
		return false
	}
	return true
}

type powerRequest struct {
	Action      string `json:"action"`
	WaitSeconds *int   `json:"wait_seconds"`
}

func (a *API) postPower(w http.ResponseWriter, r *http.Request, s *server.Server) {
	var req powerRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	action, err := server.ParsePowerAction(req.Action)
	if err != nil {
		writeError(w, r, http.StatusUnprocessableEntity, err.Error())
		return
	}
	wait := 30
	if req.WaitSeconds != nil {
		wait = *req.WaitSeconds
	}
	if wait < 0 || wait > 300 {
		writeError(w, r, http.StatusUnprocessableEntity, "wait_seconds must be between 0 and 300.")
		return
	}
	if err := s.PowerAsync(action, time.Duration(wait)*time.Second); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

type commandsRequest struct {
	Commands []string `json:"commands"`
}

func (a *API) postCommands(w http.ResponseWriter, r *http.Request, s *server.Server) {
	var req commandsRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if !s.State().IsRunning() {
		writeError(w, r, http.StatusBadGateway, "Cannot send commands to a stopped server instance.")
		return
	}
	for _, c := range req.Commands {
		if err := s.SendCommand(c); err != nil {
			if errors.Is(err, server.ErrNotRunning) {
				writeError(w, r, http.StatusBadGateway, "Cannot send commands to a stopped server instance.")
				return
			}
			a.fail(w, r, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

type logsResponse struct {
	Data []string `json:"data"`
}

func (a *API) getLogs(w http.ResponseWriter, r *http.Request, s *server.Server) {
	size := 100
	if v := r.URL.Query().Get("size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, r, http.StatusBadRequest, "size must be an integer.")
			return
		}
		if n > 0 && n < 100 {
			size = n
		}
	}
	writeJSON(w, http.StatusOK, logsResponse{Data: s.ConsoleLines(size)})
}

func (a *API) postInstall(reinstall bool) serverHandler {
	return func(w http.ResponseWriter, r *http.Request, s *server.Server) {
		if s.IsInstalling() {
			a.fail(w, r, server.ErrInstalling)
			return
		}
		if err := s.CheckPower(server.PowerStop); err != nil {
			a.fail(w, r, err)
			return
		}
		s.InstallAsync(reinstall)
		w.WriteHeader(http.StatusAccepted)
	}
}

func (a *API) postSync(w http.ResponseWriter, r *http.Request, s *server.Server) {
	if err := s.Sync(r.Context()); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) deleteServer(w http.ResponseWriter, r *http.Request, s *server.Server) {
	if a.Pulls != nil {
		a.Pulls.CancelServer(s.UUID()) // its downloads would write into a removed tree
	}
	if err := a.Servers.Delete(r.Context(), s); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type createRequest struct {
	UUID              string `json:"uuid"`
	StartOnCompletion bool   `json:"start_on_completion"`
}

func (a *API) postServers(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if !isUUID(req.UUID) {
		writeError(w, r, http.StatusUnprocessableEntity, "The data provided in the request could not be validated: uuid must be a UUID.")
		return
	}
	if _, err := a.Servers.Create(r.Context(), req.UUID, req.StartOnCompletion); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}
