package httpapi

import (
	"strings"

	"encoding/json"
	"errors"
	"github.com/google/uuid"
	"net/http"

	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/tokens"
	"github.com/wharf/wharf/internal/transfer"
	"github.com/wharf/wharf/internal/usererr"
)

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

// fail maps a domain error to its status code and answers. Errors that are
// not a client's mistake are logged and answered with a generic 500.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		decodeErr *config.DecodeError
		validErr  *config.ValidationError
		tooLarge  *http.MaxBytesError
		download  *backup.DownloadError
	)
	if ue, ok := usererr.From(err); ok {
		if ue.Err != nil {
			a.Log.Debug("request refused", "request_id", requestIDFrom(r), "path", r.URL.Path, "error", err)
		}
		writeError(w, r, userStatus(ue.Kind), ue.Message)
		return
	}
	switch {
	case errors.Is(err, tokens.ErrInvalidToken):
		// Which check failed is not the client's business (and never the token itself).
		writeError(w, r, http.StatusUnauthorized, "The signed token is invalid, expired, or was already used.")
	case errors.Is(err, transfer.ErrInProgress):
		writeError(w, r, http.StatusConflict, "A transfer is already in progress for this server.")
	case errors.Is(err, transfer.ErrNotTransferring):
		writeError(w, r, http.StatusConflict, "Server is not currently being transferred.")
	case errors.Is(err, transfer.ErrNotCancellable):
		writeError(w, r, http.StatusConflict, "The transfer is already being cancelled or has finished.")
	case errors.Is(err, transfer.ErrCancelled):
		writeError(w, r, http.StatusConflict, "The transfer was cancelled.")
	case errors.Is(err, transfer.ErrChecksumMismatch), errors.Is(err, transfer.ErrBadForm), errors.Is(err, transfer.ErrBadArchive),
		errors.Is(err, transfer.ErrSourceGone): // nobody reads that answer, but it is no error of ours
		writeError(w, r, http.StatusBadRequest, "The transfer was refused: "+err.Error()+".")
	case errors.Is(err, sandbox.ErrOutsideRoot), errors.Is(err, sandbox.ErrNotExist):
		writeError(w, r, http.StatusNotFound, "The requested file does not exist.")
	case errors.Is(err, sandbox.ErrDenied):
		writeError(w, r, http.StatusForbidden, "This file cannot be modified: present in egg denylist.")
	case errors.Is(err, sandbox.ErrIsDir):
		writeError(w, r, http.StatusBadRequest, "Cannot perform that action: file is a directory.")
	case errors.Is(err, sandbox.ErrNotDir):
		writeError(w, r, http.StatusBadRequest, "Cannot perform that action: a part of the path is not a directory.")
	case errors.Is(err, sandbox.ErrNoSpace):
		writeError(w, r, http.StatusBadRequest, "There is not enough disk space available to perform that action.")
	case errors.Is(err, sandbox.ErrExist):
		writeError(w, r, http.StatusConflict, "The destination already exists.")
	case errors.Is(err, sandbox.ErrTooLarge):
		writeError(w, r, http.StatusBadRequest, "The file is too large for this action.")
	case errors.Is(err, server.ErrInstalling), errors.Is(err, server.ErrTransferring), errors.Is(err, server.ErrRestoring),
		errors.Is(err, server.ErrExists), errors.Is(err, server.ErrLocked):
		writeError(w, r, http.StatusConflict, capitalize(err.Error())+".")
	case errors.Is(err, server.ErrSuspended):
		writeError(w, r, http.StatusBadRequest, "Cannot start or restart a server that is suspended.")
	case errors.Is(err, server.ErrBadAction):
		writeError(w, r, http.StatusUnprocessableEntity, err.Error())
	case errors.Is(err, server.ErrNotOnPanel):
		writeError(w, r, http.StatusNotFound, "The server does not exist on the backend.")
	case errors.Is(err, server.ErrDeleted):
		writeError(w, r, http.StatusNotFound, "The requested resource does not exist on this instance.")
	case errors.Is(err, backup.ErrNotFound):
		writeError(w, r, http.StatusNotFound, "The requested backup was not found on this server.")
	case errors.Is(err, backup.ErrBadUUID):
		writeError(w, r, http.StatusBadRequest, "The backup identifier must be a valid UUID.")
	case errors.Is(err, backup.ErrBadAdapter):
		writeError(w, r, http.StatusBadRequest, "The backup adapter must be one of local or object_store.")
	case errors.Is(err, backup.ErrNoURL):
		writeError(w, r, http.StatusBadRequest, "The download_url field is required when the backup adapter is set to object_store.")
	case errors.As(err, &download):
		writeError(w, r, http.StatusBadRequest, download.Error())
	case errors.Is(err, backup.ErrRestoring), errors.Is(err, backup.ErrBusyServer), errors.Is(err, backup.ErrBackupRunning):
		writeError(w, r, http.StatusConflict, capitalize(err.Error())+".")
	case errors.As(err, &tooLarge):
		writeError(w, r, http.StatusRequestEntityTooLarge, "The request body is too large.")
	case errors.As(err, &decodeErr):
		writeError(w, r, http.StatusBadRequest, "The data passed in the request was not in a parsable format: "+decodeErr.Err.Error())
	case errors.As(err, &validErr):
		writeError(w, r, http.StatusBadRequest, err.Error())
	default:
		a.Log.Error("request failed", "request_id", requestIDFrom(r), "path", r.URL.Path, "error", err)
		writeError(w, r, http.StatusInternalServerError, "An unexpected error was encountered while processing this request.")
	}
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

// userStatus is the HTTP status of a user error's kind.
func userStatus(k usererr.Kind) int {
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
	}
	return http.StatusBadRequest
}
