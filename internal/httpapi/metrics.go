package httpapi

import (
	"net/http"
	"time"

	"github.com/wharf/wharf/internal/metrics"
)

// websocketRoute is the pattern of the console websocket: its requests last
// as long as the session, so the in-flight ones are the open sessions.
const websocketRoute = "GET /api/servers/{server}/ws"

// instrument records every request in the node's metrics, labelled by the
// route pattern the mux matches (never the raw path: bounded cardinality).
func (a *API) instrument(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		if pattern == websocketRoute {
			metrics.WebsocketSessions.Inc()
			defer metrics.WebsocketSessions.Dec()
		}
		start := time.Now()
		rw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(rw, r)
		status := rw.status
		if status == 0 {
			status = http.StatusOK
		}
		metrics.ObserveRequest(pattern, status, time.Since(start))
	})
}
