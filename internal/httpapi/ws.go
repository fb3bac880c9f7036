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
func (a *API) getWebsocket(w http.ResponseWriter, r *http.Request) {
	s, ok := a.Servers.Get(r.PathValue("server"))
	if !ok {
		writeError(w, r, http.StatusNotFound, "The requested resource does not exist on this instance.")
		return
	}
	// Browsers always send Origin; a client without one is not a browser
	// page and cannot be the victim of cross-site websocket hijacking.
	if o := r.Header.Get("Origin"); o != "" && !a.OriginAllowed(o) {
		writeError(w, r, http.StatusForbidden, "The origin of this request is not allowed to connect.")
		return
	}
	release, ok := a.Websockets.Reserve(s.UUID())
	if !ok {
		writeError(w, r, http.StatusBadRequest, "Too many open websocket connections.")
		return
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
		return // Accept has answered the client
	}
	// The session runs on in the hub; this handler returns so that the
	// HTTP server frees what it holds for the request.
	a.Websockets.Go(sock, s, a.clientIP(r), release)
}
