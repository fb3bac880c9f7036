package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/tokens"
	"github.com/wharf/wharf/internal/transfer"
	"github.com/wharf/wharf/internal/usererr"
)

// answer runs a handler that fails with err through the adapter and returns
// the response, and what was logged.
func answer(t *testing.T, err error) (*httptest.ResponseRecorder, errorBody, string) {
	t.Helper()
	var logged bytes.Buffer
	a := New(Deps{Log: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	h := a.requestID(a.handle(func(w http.ResponseWriter, r *http.Request) error { return err }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	var body errorBody
	if jerr := json.Unmarshal(rec.Body.Bytes(), &body); jerr != nil {
		t.Fatalf("body is not JSON: %v: %s", jerr, rec.Body)
	}
	if body.RequestID == "" || body.RequestID != rec.Header().Get("X-Request-Id") {
		t.Fatalf("request_id %q, header %q", body.RequestID, rec.Header().Get("X-Request-Id"))
	}
	return rec, body, logged.String()
}

// An error that is not a user error never shows its text: the client gets
// the generic 500 and the log gets the whole cause.
func TestNonUserErrorNeverLeaks(t *testing.T) {
	secret := "open /var/lib/wharf/volumes/secret-path: permission denied"
	for _, err := range []error{
		errors.New(secret),
		fmt.Errorf("sync: %w", errors.New(secret)),
		// A plain error wrapping a sandbox kind that is not a user error.
		fmt.Errorf("%s: %w", secret, sandbox.ErrClosed),
	} {
		rec, body, logged := answer(t, err)
		if rec.Code != http.StatusInternalServerError {
			t.Fatalf("%v: status %d", err, rec.Code)
		}
		if body.Error != msgInternal {
			t.Fatalf("%v: message %q", err, body.Error)
		}
		if strings.Contains(rec.Body.String(), "secret-path") || strings.Contains(rec.Body.String(), "permission denied") {
			t.Fatalf("the cause reached the client: %s", rec.Body)
		}
		if !strings.Contains(logged, "secret-path") {
			t.Fatalf("the cause is not in the log: %s", logged)
		}
	}
}

// A user error shows its message only, never the cause it wraps.
func TestUserErrorShowsOnlyItsMessage(t *testing.T) {
	err := usererr.Wrap(errors.New("dial tcp 10.0.0.7:443: connection refused"), usererr.Conflict, "The server is busy.")
	rec, body, logged := answer(t, fmt.Errorf("handler: %w", err))
	if rec.Code != http.StatusConflict || body.Error != "The server is busy." {
		t.Fatalf("%d %q", rec.Code, body.Error)
	}
	if strings.Contains(rec.Body.String(), "10.0.0.7") {
		t.Fatalf("the cause reached the client: %s", rec.Body)
	}
	if !strings.Contains(logged, "10.0.0.7") {
		t.Fatalf("the cause is not in the log: %s", logged)
	}
}

func TestKindStatus(t *testing.T) {
	tests := []struct {
		kind usererr.Kind
		want int
	}{
		{usererr.Invalid, http.StatusBadRequest},
		{usererr.Unauthorized, http.StatusUnauthorized},
		{usererr.Forbidden, http.StatusForbidden},
		{usererr.NotFound, http.StatusNotFound},
		{usererr.Conflict, http.StatusConflict},
		{usererr.TooLarge, http.StatusRequestEntityTooLarge},
		{usererr.Unprocessable, http.StatusUnprocessableEntity},
		{usererr.NotRunning, http.StatusBadGateway},
		{usererr.Kind(0), http.StatusInternalServerError},
		{usererr.Kind(99), http.StatusInternalServerError},
	}
	for _, tt := range tests {
		rec, body, _ := answer(t, usererr.New(tt.kind, "Message of the kind."))
		if rec.Code != tt.want {
			t.Errorf("kind %d: status %d, want %d", tt.kind, rec.Code, tt.want)
		}
		wantMsg := "Message of the kind."
		if tt.want == http.StatusInternalServerError {
			wantMsg = msgInternal
		}
		if body.Error != wantMsg {
			t.Errorf("kind %d: message %q, want %q", tt.kind, body.Error, wantMsg)
		}
	}
}

// The answers of the domain errors, as the panels have always received them.
func TestDomainErrorAnswers(t *testing.T) {
	tests := []struct {
		err    error
		status int
		msg    string
	}{
		{fmt.Errorf("verify: %w", tokens.ErrExpired), 401, "The signed token is invalid, expired, or was already used."},
		{transfer.ErrInProgress, 409, "A transfer is already in progress for this server."},
		{transfer.ErrNotTransferring, 409, "Server is not currently being transferred."},
		{&sandbox.Error{Op: "open", Path: "/x", Kind: sandbox.ErrOutsideRoot}, 404, "The requested file does not exist."},
		{&sandbox.Error{Op: "open", Path: "/x", Kind: sandbox.ErrNotExist}, 404, "The requested file does not exist."},
		{&sandbox.Error{Op: "write", Path: "/x", Kind: sandbox.ErrDenied}, 403, "This file cannot be modified: present in egg denylist."},
		{&sandbox.Error{Op: "write", Path: "/x", Kind: sandbox.ErrNoSpace}, 400, "There is not enough disk space available to perform that action."},
		{server.ErrInstalling, 409, "Server is currently installing."},
		{server.ErrLocked, 409, "Another power action is currently being processed for this server, please try again later."},
		{server.ErrSuspended, 400, "Cannot start or restart a server that is suspended."},
		{server.ErrBadAction, 422, `the power action provided was not valid, should be one of "stop", "start", "restart", "kill"`},
		{server.ErrNotRunning, 502, "Cannot send commands to a stopped server instance."},
		{server.ErrExists, 409, "Server already exists on this node."},
		{&server.BusyError{Running: server.JobRestore}, 409, "The server is being restored."},
		{backup.ErrNotFound, 404, "The requested backup was not found on this server."},
		{&backup.DownloadError{Reason: "too many redirects"}, 400, "The backup could not be downloaded: too many redirects"},
		{fmt.Errorf("read: %w", &http.MaxBytesError{Limit: 1}), 413, "The request body is too large."},
	}
	for _, tt := range tests {
		rec, body, _ := answer(t, tt.err)
		if rec.Code != tt.status || body.Error != tt.msg {
			t.Errorf("%v: %d %q, want %d %q", tt.err, rec.Code, body.Error, tt.status, tt.msg)
		}
	}
}

// withServer answers 404 for a server that is not on this node and runs
// the handler with the server otherwise.
func TestWithServerResolvesTheServer(t *testing.T) {
	a := New(Deps{Log: slog.New(slog.DiscardHandler), Servers: server.NewManager(t.Context(), &server.Deps{Log: slog.New(slog.DiscardHandler)})})
	ran := false
	mux := http.NewServeMux()
	mux.Handle("GET /api/servers/{server}", a.withServer(func(w http.ResponseWriter, r *http.Request, s *server.Server) error {
		ran = true
		return nil
	}))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/servers/nope", nil))
	if rec.Code != http.StatusNotFound || ran {
		t.Fatalf("status %d (handler ran: %v) for an unknown server, want 404 without the handler", rec.Code, ran)
	}
}
