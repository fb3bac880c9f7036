package httpapi

import (
	"net/http"
)

type deauthorizeRequest struct {
	User    string   `json:"user"`
	Servers []string `json:"servers"`
}

// postDeauthorize is POST /api/deauthorize-user: the user's websocket
// tokens issued until now are refused on the listed servers (every server
// when servers is omitted or empty), and the user's open sessions there are
// closed (deauth). Other users stay connected.
func (a *API) postDeauthorize(w http.ResponseWriter, r *http.Request) error {
	var req deauthorizeRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	if err := a.deauth.Deauthorize(req.User, req.Servers); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
