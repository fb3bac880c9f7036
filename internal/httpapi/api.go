// Package httpapi is the HTTP surface of the daemon: the route table, the
// middleware and the handlers. It translates HTTP into calls on the domain
// packages and their typed errors back into status codes, in one place.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/activity"
	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/backupview"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/deauth"
	"github.com/wharf/wharf/internal/hostinfo"
	"github.com/wharf/wharf/internal/metrics"
	"github.com/wharf/wharf/internal/pull"
	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/tokens"
	"github.com/wharf/wharf/internal/transfer"
	"github.com/wharf/wharf/internal/wsapi"
)

// Deps are the parts of the daemon the API drives.
type Deps struct {
	Config  *config.Store
	Servers *server.Manager
	// Tokens verifies the JWTs of signed URLs, websockets and transfers.
	Tokens *tokens.Verifier
	// Transfers runs the outgoing and incoming server transfers.
	Transfers *transfer.Service
	// OneTime remembers the one-time ids of signed URLs.
	OneTime *tokens.OneTimeStore
	Backups *backup.Service
	// Browse is the backups folder of the servers' files (issue 35); nil:
	// none.
	Browse   *backupview.View
	Log      *slog.Logger
	Version  string
	BootTime time.Time
	// Denylist refuses websocket tokens of deauthorized users.
	Denylist *tokens.Denylist
	// Websockets serves the websocket console.
	Websockets *wsapi.Hub
	// Activity queues activity records for the backend; nil records nothing.
	Activity *activity.Queue
	// Pulls runs the file manager's remote downloads; nil disables them.
	Pulls *pull.Service
	// OnConfigApplied runs after POST /api/update applied a new configuration.
	OnConfigApplied func(old, next *config.Config)
	// Runtime is the container runtime, for its optional abilities (image
	// prune, engine description); nil has none.
	Runtime runtime.Runtime
	// ConfigPath and Commit go into the diagnostics report.
	ConfigPath string
	Commit     string
	// RecentLogs returns the daemon's last n log lines for the diagnostics
	// report, whatever started the daemon; nil reads the journal.
	RecentLogs func(n int) []string
	// Metrics counts the API's requests (the daemon's collectors); nil:
	// not counted.
	Metrics *metrics.Metrics
	// Stopping ends when the daemon begins to shut down: long file work
	// (compress, decompress, search, copy) ends then. nil: never.
	Stopping context.Context
}

// API serves the HTTP interface.
type API struct {
	Deps
	deauth *deauth.Service
	cpu    *hostinfo.CPUMeter
	paths  *hostinfo.Paths // nil: the host's /proc (tests set their own)
}

// New returns the API.
func New(d Deps) *API {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.OnConfigApplied == nil {
		d.OnConfigApplied = func(_, _ *config.Config) {}
	}
	return &API{Deps: d, deauth: &deauth.Service{Denylist: d.Denylist, Servers: d.Servers}, cpu: &hostinfo.CPUMeter{Path: hostinfo.Proc().Stat}}
}

// Handler returns the complete HTTP handler: middleware around the route table.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range a.routes() {
		h := rt.handler
		if rt.auth == authBearer {
			h = a.requireBearer(h)
		}
		mux.Handle(rt.pattern, h)
	}
	dispatch := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			a.unmatched(mux, w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
	var h http.Handler = a.instrument(mux, dispatch)
	h = a.cors(h)
	h = a.limitUnauthenticatedBody(h)
	h = a.accessLog(h)
	h = a.recoverPanics(h)
	h = a.requestID(h)
	h = a.identify(h)
	return h
}

// unmatched answers requests that match no route: 405 when the path exists
// with another method, 404 otherwise. Under /api/ the bearer token is checked
// first, so the route table is not revealed to strangers.
func (a *API) unmatched(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	answer := func(w http.ResponseWriter, r *http.Request) {
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, p := mux.Handler(probe); p != "" {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeError(w, r, http.StatusMethodNotAllowed, "The requested method is not allowed on this endpoint.")
			return
		}
		a.fail(w, r, errNoResource)
	}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		a.requireBearer(http.HandlerFunc(answer)).ServeHTTP(w, r)
		return
	}
	answer(w, r)
}
