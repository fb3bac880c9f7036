package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/wharf/wharf/internal/usererr"
)

// handlerFunc is a handler that returns its failure instead of answering it:
// the adapter answers every error in one place (fail).
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle adapts h to http.Handler.
func (a *API) handle(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			a.fail(w, r, err)
		}
	})
}

// Errors of the HTTP requests themselves; the domain packages declare theirs.
var (
	errNoResource   = usererr.New(usererr.NotFound, "The requested resource does not exist on this instance.")
	errNoBearer     = usererr.New(usererr.Unauthorized, "The required authorization heads were not present in the request.")
	errWrongBearer  = usererr.New(usererr.Forbidden, "You are not authorized to access this endpoint.")
	errNoToken      = usererr.New(usererr.Unauthorized, "A valid signed token is required.")
	errBodyTooLarge = usererr.New(usererr.TooLarge, "The request body is too large.")
	errBadUUID      = usererr.New(usererr.Unprocessable, "The data provided in the request could not be validated: uuid must be a UUID.")
	errBadWait      = usererr.New(usererr.Unprocessable, "wait_seconds must be between 0 and 300.")
	errBadSize      = usererr.New(usererr.Invalid, "size must be an integer.")
	errNotRegular   = usererr.New(usererr.Invalid, "Cannot download this type of file: only regular files can be downloaded.")
	errBadTransfer  = usererr.New(usererr.Unprocessable, "The data provided in the request could not be validated: url (an http or https URL) and token are required.")
	errTransferForm = usererr.New(usererr.Invalid, "The request must be a multipart form holding the archive and its checksum.")
	errBadOrigin    = usererr.New(usererr.Forbidden, "The origin of this request is not allowed to connect.")
	errTooManyWS    = usererr.New(usererr.Invalid, "Too many open websocket connections.")
)

// msgInternal answers every error that is not a user error.
const msgInternal = "An unexpected error was encountered while processing this request."

// statusOf is the HTTP status of each kind of user error; 0 for an unknown kind.
func statusOf(k usererr.Kind) int {
	switch k {
	case usererr.Invalid:
		return http.StatusBadRequest
	case usererr.Unauthorized:
		return http.StatusUnauthorized
	case usererr.Forbidden:
		return http.StatusForbidden
	case usererr.NotFound:
		return http.StatusNotFound
	case usererr.Conflict:
		return http.StatusConflict
	case usererr.TooLarge:
		return http.StatusRequestEntityTooLarge
	case usererr.Unprocessable:
		return http.StatusUnprocessableEntity
	case usererr.NotRunning:
		return http.StatusBadGateway
	case usererr.TooMany:
		return http.StatusTooManyRequests
	case usererr.Busy:
		return http.StatusServiceUnavailable
	}
	return 0
}

// errorBody is the shape of every error answer.
type errorBody struct {
	Error     string `json:"error"`
	RequestID string `json:"request_id"`
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with {"error": msg, "request_id": id}.
func writeError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg, RequestID: requestIDFrom(r)})
}

// fail answers err: a user error (usererr) with its kind's status and its
// message; a body over its limit with 413; anything else with the generic
// 500, its full cause going to the log only.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		err = fmt.Errorf("%w: %w", errBodyTooLarge, err)
	}
	ue, ok := usererr.From(err)
	status := 0
	if ok {
		status = statusOf(ue.Kind)
	}
	if status == 0 {
		a.Log.Error("request failed", "request_id", requestIDFrom(r), "path", r.URL.Path, "error", err)
		writeError(w, r, http.StatusInternalServerError, msgInternal)
		return
	}
	if status == http.StatusUnauthorized && errors.Is(err, errNoBearer) {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	a.Log.Debug("request refused", "request_id", requestIDFrom(r), "path", r.URL.Path, "status", status, "error", err)
	writeError(w, r, status, ue.Message)
}

// badBody is a request body the JSON decoder refused (400, even when it is
// over its limit, as the panels expect). The decoder's text describes only
// the client's own body.
func badBody(err error) error {
	return usererr.New(usererr.Invalid, "The data passed in the request was not in a parsable format: "+err.Error())
}
