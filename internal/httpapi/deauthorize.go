package httpapi

import (
	"net/http"

	"github.com/wharf/wharf/internal/usererr"
)

type deauthorizeRequest struct {
	User    string   `json:"user"`
	Servers []string `json:"servers"`
}

// deauthorizeBody is what reaches the node. Pterodactyl sends the request
// flat; the Pelican panel (DaemonServerRepository::deauthorize) passes
// ['json' => [...]] as the body of Laravel's post(), so its request arrives
// nested under "json". Both mean the same.
type deauthorizeBody struct {
	deauthorizeRequest
	Nested *deauthorizeRequest `json:"json"`
}

var errDeauthorizeBothShapes = usererr.New(usererr.Invalid,
	`the request names the user both at its top level and under "json": send one of them`)

// request is the deauthorization asked, from whichever shape was sent.
func (b deauthorizeBody) request() (deauthorizeRequest, error) {
	if b.Nested == nil {
		return b.deauthorizeRequest, nil
	}
	if b.User != "" || len(b.Servers) > 0 {
		return deauthorizeRequest{}, errDeauthorizeBothShapes
	}
	return *b.Nested, nil
}

// postDeauthorize is POST /api/deauthorize-user: the user's websocket
// tokens issued until now are refused on the listed servers (every server
// when servers is omitted or empty), and the user's open sessions there are
// closed (deauth). Other users stay connected.
func (a *API) postDeauthorize(w http.ResponseWriter, r *http.Request) error {
	var body deauthorizeBody
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	req, err := body.request()
	if err != nil {
		return err
	}
	if err := a.deauth.Deauthorize(req.User, req.Servers); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
