package httpapi

import (
	"net/http"
	"time"
)

// instrument records each request that reaches the route table in the
// node's metrics (CORS preflights, answered before it, are not counted),
// labelled by the route pattern the mux matches ("unmatched" when
// none; never the raw path: bounded cardinality). The status comes from
// the writer the outer middleware wrapped.
func (a *API) instrument(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		start := time.Now()
		rw := wrapStatus(w)
		next.ServeHTTP(rw, r)
		status := rw.status
		if status == 0 {
			status = http.StatusOK
		}
		a.Metrics.ObserveRequest(pattern, status, time.Since(start))
	})
}
