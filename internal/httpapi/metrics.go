package httpapi

import (
	"net/http"
	"time"

	"github.com/wharf/wharf/internal/metrics"
)

// instrument records every request in the node's metrics, labelled by the
// route pattern the mux matches (never the raw path: bounded cardinality).
func (a *API) instrument(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
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
