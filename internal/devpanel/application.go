package devpanel

import (
	"net/http"
	"strings"
	"sync"
)

// application is the part of the panel's application API (administrator
// keys, /api/application) that `wharf configure` uses.
type application struct {
	mu    sync.Mutex
	keys  map[string]bool           // API key -> may read nodes
	nodes map[string]map[string]any // node id -> its configuration
}

// AddApplicationKey accepts key on the application API; canReadNodes false
// makes it a key without the Nodes read permission (403).
func (p *Panel) AddApplicationKey(key string, canReadNodes bool) {
	p.app.mu.Lock()
	defer p.app.mu.Unlock()
	if p.app.keys == nil {
		p.app.keys = map[string]bool{}
	}
	p.app.keys[key] = canReadNodes
}

// PutNodeConfiguration sets what GET /api/application/nodes/{id}/configuration
// answers for node id: the node's configuration as the panel renders it.
func (p *Panel) PutNodeConfiguration(id string, cfg map[string]any) {
	p.app.mu.Lock()
	defer p.app.mu.Unlock()
	if p.app.nodes == nil {
		p.app.nodes = map[string]map[string]any{}
	}
	p.app.nodes[id] = cfg
}

// NodeConfiguration is the configuration the Pterodactyl panel renders for a
// node (its "Configuration" tab): the keys it knows, the rest left to the
// agent's defaults.
func NodeConfiguration(uuid, tokenID, token, remote string, port int) map[string]any {
	return map[string]any{
		"debug": false, "uuid": uuid, "token_id": tokenID, "token": token,
		"api": map[string]any{
			"host": "0.0.0.0", "port": port,
			"ssl":          map[string]any{"enabled": false, "cert": "", "key": ""},
			"upload_limit": 100,
		},
		"system":         map[string]any{"data": "/var/lib/pterodactyl/volumes", "sftp": map[string]any{"bind_port": 2022}},
		"allowed_mounts": []string{},
		"remote":         remote,
	}
}

func (p *Panel) serveApplication(w http.ResponseWriter, r *http.Request) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	p.app.mu.Lock()
	canRead, known := p.app.keys[key]
	p.app.mu.Unlock()
	if !ok || !known {
		writeErr(w, http.StatusUnauthorized, "AuthenticationException", "Unauthenticated.")
		return
	}
	rest, found := strings.CutPrefix(r.URL.Path, "/api/application/nodes/")
	id, tail, _ := strings.Cut(rest, "/")
	if r.Method != http.MethodGet || !found || tail != "configuration" {
		writeErr(w, http.StatusNotFound, "NotFoundHttpException", "The requested resource could not be found on the server.")
		return
	}
	if !canRead {
		writeErr(w, http.StatusForbidden, "AccessDeniedHttpException", "This action is unauthorized.")
		return
	}
	p.app.mu.Lock()
	cfg, exists := p.app.nodes[id]
	p.app.mu.Unlock()
	if !exists {
		writeErr(w, http.StatusNotFound, "NotFoundHttpException", "The requested resource could not be found on the server.")
		return
	}
	writeJSON(w, cfg)
}
