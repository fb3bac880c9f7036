package httpapi

import (
	"net/http"

	"github.com/wharf/wharf/internal/server"
)

type serverHandler func(w http.ResponseWriter, r *http.Request, s *server.Server)

// withServer resolves {server} and answers 404 when it is not on this node.
func (a *API) withServer(h serverHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := a.Servers.Get(r.PathValue("server"))
		if !ok {
			writeError(w, r, http.StatusNotFound, "The requested resource does not exist on this instance.")
			return
		}
		h(w, r, s)
	})
}

func (a *API) listServers(w http.ResponseWriter, r *http.Request) {
	all := a.Servers.All()
	out := make([]server.Details, 0, len(all))
	for _, s := range all {
		out = append(out, s.Details())
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) getServer(w http.ResponseWriter, r *http.Request, s *server.Server) {
	writeJSON(w, http.StatusOK, s.Details())
}
