package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/server"
)

type deauthorizeRequest struct {
	User    string   `json:"user"`
	Servers []string `json:"servers"`
}

// postDeauthorize is POST /api/deauthorize-user: the user's websocket
// tokens issued until now are refused on the listed servers (every server
// when servers is omitted or empty), and the user's open sessions there are
// closed. Other users stay connected.
func (a *API) postDeauthorize(w http.ResponseWriter, r *http.Request) {
	var req deauthorizeRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if req.User == "" {
		writeError(w, r, http.StatusBadRequest, "The user field is required.")
		return
	}
	ids := make([]string, 0, len(req.Servers))
	for _, id := range req.Servers {
		ids = append(ids, strings.ToLower(id))
	}
	a.Denylist.Deny(req.User, ids, time.Now())

	var targets []*server.Server
	if len(ids) == 0 {
		targets = a.Servers.All()
	} else {
		for _, id := range ids {
			if s, ok := a.Servers.Get(id); ok {
				targets = append(targets, s)
			}
		}
	}
	for _, s := range targets {
		s.CloseSessions(req.User, server.CloseRevoked, "user deauthorized")
	}
	w.WriteHeader(http.StatusNoContent)
}
