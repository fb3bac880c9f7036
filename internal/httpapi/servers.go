package httpapi

import (
	"net/http"

	"github.com/wharf/wharf/internal/server"
)

// serverHandler is a handler of a route under /api/servers/{server}.
type serverHandler func(w http.ResponseWriter, r *http.Request, s *server.Server) error

// withServer resolves {server} (404 when it is not on this node) and runs h.
func (a *API) withServer(h serverHandler) http.Handler {
	return a.handle(func(w http.ResponseWriter, r *http.Request) error {
		s, ok := a.Servers.Get(r.PathValue("server"))
		if !ok {
			return errNoResource
		}
		return h(w, r, s)
	})
}

func (a *API) listServers(w http.ResponseWriter, r *http.Request) error {
	all := a.Servers.All()
	out := make([]server.Details, 0, len(all))
	for _, s := range all {
		out = append(out, s.Details())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) getServer(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	writeJSON(w, http.StatusOK, s.Details())
	return nil
}
