package httpapi

import (
	"fmt"
	"net/http"

	"github.com/wharf/wharf/internal/server"
)

// serverHandler is a handler of a route under /api/servers/{server}.
type serverHandler func(w http.ResponseWriter, r *http.Request, s *server.Server) error

// withServer resolves {server} (404 when it is not on this node) and runs h,
// a serverHandler. A handler written before handlers returned errors,
// func(w, r, s) answering its errors itself through fail, is accepted too
// until it is converted; any other type is a programming error, found when
// the route table is built.
func (a *API) withServer(h any) http.Handler {
	var run serverHandler
	switch h := h.(type) {
	case serverHandler:
		run = h
	case func(http.ResponseWriter, *http.Request, *server.Server) error:
		run = h
	case func(http.ResponseWriter, *http.Request, *server.Server):
		run = func(w http.ResponseWriter, r *http.Request, s *server.Server) error {
			h(w, r, s)
			return nil
		}
	default:
		panic(fmt.Sprintf("httpapi: withServer: %T is not a server handler", h))
	}
	return a.handle(func(w http.ResponseWriter, r *http.Request) error {
		s, ok := a.Servers.Get(r.PathValue("server"))
		if !ok {
			return errNoResource
		}
		return run(w, r, s)
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
