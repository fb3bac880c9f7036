// Package devpanel is a small backend that speaks the panel's remote API. It
// serves server definitions from YAML files for `wharf dev`, where no panel
// exists, and it is the fake panel of the end-to-end tests: it records every
// call so that tests can check what the daemon reported.
package devpanel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// Server is one server definition.
type Server struct {
	UUID                 string         `yaml:"uuid" json:"uuid"`
	Settings             map[string]any `yaml:"settings" json:"settings"`
	ProcessConfiguration map[string]any `yaml:"process_configuration" json:"process_configuration"`
	InstallScript        *InstallScript `yaml:"install_script" json:"-"`
}

// InstallScript is what GET /servers/{uuid}/install answers.
type InstallScript struct {
	ContainerImage string `yaml:"container_image" json:"container_image"`
	Entrypoint     string `yaml:"entrypoint" json:"entrypoint"`
	Script         string `yaml:"script" json:"script"`
}

// Call is one request the daemon made.
type Call struct {
	Method string
	Path   string
	Query  string
	Body   json.RawMessage
	Header http.Header
	At     time.Time
}

// Panel is the backend. The zero value is not usable; call New.
type Panel struct {
	tokenID, token string

	mu      sync.Mutex
	servers map[string]*Server
	calls   []Call
	notify  chan struct{}
	// BackupUploadURLs answers GET /backups/{uuid}?size=; nil answers 404.
	backupURLs func(backup string, size int64) (parts []string, partSize int64, err error)
	failNext   map[string]int // path prefix -> number of 500 answers to give
	missing    []string       // path suffixes answered 404, as by a panel without the route
	sftpUsers  []SFTPUser
	sftpStatus int // when not 0, every /sftp/auth answers this status
	app        application
}

// New returns a panel that accepts the node credentials tokenID.token.
func New(tokenID, token string) *Panel {
	return &Panel{tokenID: tokenID, token: token, servers: map[string]*Server{}, notify: make(chan struct{}), failNext: map[string]int{}}
}

// LoadDir reads every *.yml / *.yaml file of dir as a Server.
func (p *Panel) LoadDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yml" && ext != ".yaml") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		var s Server
		if err := yaml.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("devpanel: %s: %w", e.Name(), err)
		}
		if s.UUID == "" {
			return fmt.Errorf("devpanel: %s: uuid is required", e.Name())
		}
		if s.Settings == nil {
			s.Settings = map[string]any{}
		}
		s.Settings["uuid"] = s.UUID
		p.PutServer(s)
	}
	return nil
}

// PutServer adds or replaces a server definition.
func (p *Panel) PutServer(s Server) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cp := s
	p.servers[s.UUID] = &cp
}

// UpdateSettings changes one settings key of a server (for example "suspended").
func (p *Panel) UpdateSettings(uuid, key string, value any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.servers[uuid]; ok {
		s.Settings[key] = value
	}
}

// ServerIDs returns the UUIDs of the servers, sorted.
func (p *Panel) ServerIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, 0, len(p.servers))
	for id := range p.servers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// DeleteServer removes a definition.
func (p *Panel) DeleteServer(uuid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.servers, uuid)
}

// SetBackupUploadURLs installs the answer of GET /backups/{uuid}.
func (p *Panel) SetBackupUploadURLs(fn func(backup string, size int64) ([]string, int64, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backupURLs = fn
}

// FailNext makes the next n requests whose path starts with prefix answer 500.
func (p *Panel) FailNext(prefix string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failNext[prefix] = n
}

// RemoveRoute makes every request whose path ends with suffix answer 404, as
// a panel without that route does (Pterodactyl has no container/status).
func (p *Panel) RemoveRoute(suffix string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.missing = append(p.missing, suffix)
}

func (p *Panel) routeMissing(path string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, suffix := range p.missing {
		if strings.HasSuffix(path, suffix) {
			return true
		}
	}
	return false
}

// Calls returns the calls received so far.
func (p *Panel) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Call(nil), p.calls...)
}

// CallsTo returns the calls with this method whose path is exactly path.
func (p *Panel) CallsTo(method, path string) []Call {
	var out []Call
	for _, c := range p.Calls() {
		if c.Method == method && c.Path == path {
			out = append(out, c)
		}
	}
	return out
}

// WaitForCall blocks until a call with this method and path arrives or the
// timeout passes, and returns it.
func (p *Panel) WaitForCall(method, path string, timeout time.Duration) (Call, bool) {
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		for _, c := range p.calls {
			if c.Method == method && c.Path == path {
				p.mu.Unlock()
				return c, true
			}
		}
		ch := p.notify
		p.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			return Call{}, false
		}
	}
}

func (p *Panel) record(r *http.Request, body []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, Call{
		Method: r.Method, Path: strings.TrimPrefix(r.URL.Path, "/api/remote"), Query: r.URL.RawQuery,
		Body: json.RawMessage(body), Header: r.Header.Clone(), At: time.Now(),
	})
	close(p.notify)
	p.notify = make(chan struct{})
}

// Handler serves the remote API under /api/remote.
func (p *Panel) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/remote/servers", p.listServers)
	mux.HandleFunc("GET /api/remote/servers/{uuid}", p.getServer)
	mux.HandleFunc("GET /api/remote/servers/{uuid}/install", p.getInstall)
	mux.HandleFunc("GET /api/remote/backups/{uuid}", p.getBackupURLs)
	mux.HandleFunc("POST /api/remote/sftp/auth", p.sftpAuth)
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }
	for _, pattern := range []string{
		"POST /api/remote/servers/reset",
		"POST /api/remote/servers/{uuid}/install",
		"POST /api/remote/servers/{uuid}/transfer/success",
		"POST /api/remote/servers/{uuid}/transfer/failure",
		"POST /api/remote/servers/{uuid}/container/status",
		"POST /api/remote/backups/{uuid}",
		"POST /api/remote/backups/{uuid}/restore",
		"POST /api/remote/activity",
	} {
		mux.HandleFunc(pattern, ok)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		p.record(r, body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.HasPrefix(r.URL.Path, "/api/application/") {
			p.serveApplication(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+p.tokenID+"."+p.token {
			writeErr(w, http.StatusForbidden, "AccessDeniedHttpException", "This action is unauthorized.")
			return
		}
		if p.routeMissing(r.URL.Path) {
			writeErr(w, http.StatusNotFound, "NotFoundHttpException", "The requested resource could not be located.")
			return
		}
		if p.takeFailure(strings.TrimPrefix(r.URL.Path, "/api/remote")) {
			writeErr(w, http.StatusInternalServerError, "HttpException", "injected failure")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (p *Panel) takeFailure(path string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for prefix, n := range p.failNext {
		if n > 0 && strings.HasPrefix(path, prefix) {
			p.failNext[prefix] = n - 1
			return true
		}
	}
	return false
}

func writeErr(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"errors": []map[string]string{{"code": code, "status": strconv.Itoa(status), "detail": detail}},
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (p *Panel) listServers(w http.ResponseWriter, r *http.Request) {
	perPage, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
	if perPage < 1 {
		perPage = 50
	}
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	if page < 1 {
		page = 1 // the panel answers page 0 as page 1
	}
	p.mu.Lock()
	ids := make([]string, 0, len(p.servers))
	for id := range p.servers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	total := len(ids)
	last := max(1, (total+perPage-1)/perPage)
	from := min((page-1)*perPage, total)
	to := min(from+perPage, total)
	data := make([]Server, 0, to-from)
	for _, id := range ids[from:to] {
		data = append(data, *p.servers[id])
	}
	p.mu.Unlock()
	writeJSON(w, map[string]any{
		"data": data,
		"meta": map[string]int{"current_page": page, "from": from + 1, "last_page": last, "per_page": perPage, "to": to, "total": total},
	})
}

func (p *Panel) getServer(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	s, ok := p.servers[r.PathValue("uuid")]
	var cp Server
	if ok {
		cp = *s
	}
	p.mu.Unlock()
	if !ok {
		writeErr(w, http.StatusNotFound, "NotFoundHttpException", "The requested resource could not be found.")
		return
	}
	writeJSON(w, map[string]any{"settings": cp.Settings, "process_configuration": cp.ProcessConfiguration})
}

func (p *Panel) getInstall(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	s, ok := p.servers[r.PathValue("uuid")]
	var script *InstallScript
	if ok {
		script = s.InstallScript
	}
	p.mu.Unlock()
	if !ok {
		writeErr(w, http.StatusNotFound, "NotFoundHttpException", "The requested resource could not be found.")
		return
	}
	if script == nil {
		script = &InstallScript{ContainerImage: "~wharf-dev/installer:latest", Entrypoint: "sh", Script: "echo nothing to install\n"}
	}
	writeJSON(w, script)
}

func (p *Panel) getBackupURLs(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	fn := p.backupURLs
	p.mu.Unlock()
	if fn == nil {
		writeErr(w, http.StatusNotFound, "NotFoundHttpException", "Remote backups are not configured on this panel.")
		return
	}
	size, _ := strconv.ParseInt(r.URL.Query().Get("size"), 10, 64)
	parts, partSize, err := fn(r.PathValue("uuid"), size)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "BadRequestHttpException", err.Error())
		return
	}
	writeJSON(w, map[string]any{"parts": parts, "part_size": partSize})
}
