package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
)

const knownServer = "1e2d3c4b-5a69-4788-9a0b-1c2d3e4f5a6b"

func exampleServer(uuid string) devpanel.Server {
	return devpanel.Server{
		UUID: uuid,
		Settings: map[string]any{
			"uuid": uuid, "suspended": false, "invocation": "./run",
			"build":     map[string]any{"memory_limit": 128, "disk_space": 100},
			"container": map[string]any{"image": "~wharf-test/gameserver:latest"},
		},
		ProcessConfiguration: map[string]any{"startup": map[string]any{"done": []string{"Done ("}}},
	}
}

// Every bearer-protected endpoint of the spec refuses a missing, malformed or wrong token.
func TestProtectedEndpointsRequireTheNodeToken(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{exampleServer(knownServer)}})
	s := "/api/servers/" + knownServer
	endpoints := []struct{ method, path string }{
		{"POST", "/api/update"}, {"GET", "/api/system"}, {"GET", "/api/servers"}, {"POST", "/api/servers"},
		{"DELETE", "/api/transfers/" + knownServer}, {"POST", "/api/deauthorize-user"},
		{"GET", s}, {"DELETE", s}, {"POST", s + "/power"}, {"POST", s + "/commands"}, {"GET", s + "/logs"},
		{"POST", s + "/install"}, {"POST", s + "/reinstall"}, {"POST", s + "/sync"},
		{"POST", s + "/backup"}, {"POST", s + "/backup/" + knownServer + "/restore"}, {"DELETE", s + "/backup/" + knownServer},
		{"POST", s + "/transfer"}, {"DELETE", s + "/transfer"},
		{"GET", s + "/files/list-directory?directory=/"},
	}
	for _, ep := range endpoints {
		for _, tc := range []struct {
			auth string
			want int
		}{{"-", 401}, {"Basic " + n.Token, 401}, {"Bearer", 401}, {"Bearer wrong-token", 403}} {
			res, body := n.request(ep.method, ep.path, nil, tc.auth)
			if res.StatusCode != tc.want {
				t.Errorf("%s %s with %q: status %d, want %d", ep.method, ep.path, tc.auth, res.StatusCode, tc.want)
				continue
			}
			if tc.want == 401 && res.Header.Get("WWW-Authenticate") != "Bearer" {
				t.Errorf("%s %s: no WWW-Authenticate: Bearer", ep.method, ep.path)
			}
			var e struct {
				Error     string `json:"error"`
				RequestID string `json:"request_id"`
			}
			if json.Unmarshal(body, &e) != nil || e.Error == "" || e.RequestID != res.Header.Get("X-Request-Id") || e.RequestID == "" {
				t.Errorf("%s %s: body %s is not {error, request_id}", ep.method, ep.path, body)
			}
		}
	}
}

func TestSystemInformation(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true})
	res, body := n.request("GET", "/api/system", nil, "")
	if res.StatusCode != 200 {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	var info map[string]any
	if err := json.Unmarshal(body, &info); err != nil {
		t.Fatal(err)
	}
	if info["architecture"] != runtime.GOARCH || info["os"] != runtime.GOOS || info["cpu_count"] != float64(runtime.NumCPU()) {
		t.Fatalf("info = %v", info)
	}
	if v, _ := info["kernel_version"].(string); v == "" {
		t.Fatalf("kernel_version empty: %v", info)
	}
	if v, _ := info["version"].(string); v == "" {
		t.Fatalf("version empty: %v", info)
	}
}

func TestServersAreLoadedFromThePanelAtBoot(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{exampleServer(knownServer)}})
	res, body := n.request("GET", "/api/servers/"+knownServer, nil, "")
	if res.StatusCode != 200 {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	var d struct {
		State         string `json:"state"`
		IsSuspended   bool   `json:"is_suspended"`
		Utilization   map[string]any
		Configuration struct {
			UUID      string `json:"uuid"`
			Suspended bool   `json:"suspended"`
		}
	}
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	if d.Configuration.UUID != knownServer || d.State == "" || d.Utilization == nil {
		t.Fatalf("details = %s", body)
	}
	res, body = n.request("GET", "/api/servers/00000000-0000-4000-8000-000000000000", nil, "")
	if res.StatusCode != 404 || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("unknown server: status %d body %s", res.StatusCode, body)
	}
	res, body = n.request("GET", "/api/servers", nil, "")
	var list []json.RawMessage
	if res.StatusCode != 200 || json.Unmarshal(body, &list) != nil || len(list) != 1 {
		t.Fatalf("list: status %d body %s", res.StatusCode, body)
	}
	if _, ok := n.Panel.WaitForCall("POST", "/servers/reset", 10*time.Second); !ok {
		t.Fatal("the daemon never called POST /servers/reset")
	}
}

func TestUpdateChangesFileAndBehaviour(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true})
	body := map[string]any{
		"uuid": n.Config.UUID, "token_id": n.Config.TokenID, "token": "rotated-token-1234567890",
		"remote": n.Config.Remote, "api": map[string]any{"host": "127.0.0.1", "port": n.Config.API.Port, "upload_limit": 250},
		"system": map[string]any{"data": "/etc", "username": "root"}, "allowed_mounts": []string{"/"},
	}
	res, data := n.request("POST", "/api/update", body, "")
	if res.StatusCode != 200 || strings.TrimSpace(string(data)) != `{"applied":true}` {
		t.Fatalf("update: %d %s", res.StatusCode, data)
	}
	onDisk, err := config.Load(n.CfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if onDisk.Token != "rotated-token-1234567890" || onDisk.API.UploadLimit != 250 {
		t.Fatalf("file not updated: token %q upload_limit %d", onDisk.Token, onDisk.API.UploadLimit)
	}
	if onDisk.System.Data != n.Config.System.Data || len(onDisk.AllowedMounts) != 0 {
		t.Fatalf("host-access keys changed: data %q mounts %v", onDisk.System.Data, onDisk.AllowedMounts)
	}
	if st, _ := os.Stat(n.CfgPath); st.Mode().Perm() != 0o600 {
		t.Fatalf("config mode %o, want 600", st.Mode().Perm())
	}
	if res, _ := n.request("GET", "/api/system", nil, ""); res.StatusCode != http.StatusForbidden {
		t.Fatalf("old token still accepted: %d", res.StatusCode)
	}
	if res, _ := n.request("GET", "/api/system", nil, "Bearer rotated-token-1234567890"); res.StatusCode != 200 {
		t.Fatalf("new token refused: %d", res.StatusCode)
	}
	n.Token = "rotated-token-1234567890"

	// An invalid configuration changes nothing.
	res, data = n.request("POST", "/api/update", `{"uuid":"x","token_id":"y","token":"z","api":{"port":0}}`, "")
	if res.StatusCode != 400 {
		t.Fatalf("invalid update: %d %s", res.StatusCode, data)
	}
	res, data = n.request("POST", "/api/update", `{"uuid":`, "")
	if res.StatusCode != 400 {
		t.Fatalf("bad JSON: %d %s", res.StatusCode, data)
	}
	if res, _ := n.request("GET", "/api/system", nil, ""); res.StatusCode != 200 {
		t.Fatal("a refused update changed the token")
	}
}

func TestUpdateIgnoredWhenTheNodeSaysSo(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true, mutate: func(c *config.Config) { c.IgnorePanelConfigUpdates = true }})
	before, _ := os.ReadFile(n.CfgPath)
	res, data := n.request("POST", "/api/update", map[string]any{"uuid": "u", "token_id": "t", "token": "other"}, "")
	if res.StatusCode != 200 || strings.TrimSpace(string(data)) != `{"applied":false}` {
		t.Fatalf("%d %s", res.StatusCode, data)
	}
	after, _ := os.ReadFile(n.CfgPath)
	if string(before) != string(after) {
		t.Fatal("the file changed")
	}
	if res, _ := n.request("GET", "/api/system", nil, ""); res.StatusCode != 200 {
		t.Fatal("the token changed in memory")
	}
}

// attacks.md A5: nothing secret reaches the log.
func TestLogNeverContainsSecrets(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true})
	const jwtLike = "eyJhbGciOiJIUzI1NiJ9.eyJzZWNyZXQiOnRydWV9.c2lnbmF0dXJl"
	n.request("GET", "/download/file?token="+jwtLike, nil, "-")
	n.request("GET", "/api/system?token="+jwtLike, nil, "")
	n.request("GET", "/api/system", nil, "Bearer wrong-but-secret-value")
	log := n.log.String()
	for _, secret := range []string{jwtLike, n.Token, "wrong-but-secret-value"} {
		if strings.Contains(log, secret) {
			t.Fatalf("the log contains a secret %q:\n%s", secret, log)
		}
	}
	if !strings.Contains(log, "REDACTED") {
		t.Fatalf("expected a redacted request line in the log:\n%s", log)
	}
}
