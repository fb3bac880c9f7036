package httpapi

import (
	"net/http"

	"github.com/coder/websocket"

	"github.com/wharf/wharf/internal/wsapi"
)

// getWebsocket upgrades GET /api/servers/{server}/ws. It needs no bearer
// token: the client authenticates inside the socket with a JWT (wsapi).
// Before the upgrade: 404 for an unknown server, 403 for a browser Origin
// that is neither the backend's nor in allowed_origins, 400 when the server
// already has its maximum of sockets.
func (a *API) getWebsocket(w http.ResponseWriter, r *http.Request) error {
	s, ok := a.Servers.Get(r.PathValue("server"))
	if !ok {
		return errNoResource
	}
	// Browsers always send Origin; a client without one is not a browser
	// page and cannot be the victim of cross-site websocket hijacking.
	if o := r.Header.Get("Origin"); o != "" && !originAllowed(a.Config.Get(), o) {
		return errBadOrigin
	}
	release, ok := a.Websockets.Reserve(s.UUID())
	if !ok {
		return errTooManyWS
	}
	liftBodyDeadline(w)
	w.Header().Set("Content-Security-Policy", "default-src 'self'")
	w.Header().Set("X-Frame-Options", "DENY")
	sock, err := wsapi.Accept(w, r, &websocket.AcceptOptions{
		// The Origin was checked above against the backend and allowed_origins.
		InsecureSkipVerify: true,
	})
	if err != nil {
		release()
		return nil // Accept has answered the client
	}
	// The session runs on in the hub; this handler returns so that the
	// HTTP server frees what it holds for the request.
	a.Websockets.Go(sock, s, a.clientIP(r), release)
	return nil
}
