package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/hostinfo"
	wruntime "github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/tokens"
)

// nodeAPI is an API with one server, a denylist and the host paths of dir
// (fake /proc files written by the tests).
type nodeAPI struct {
	api    *API
	h      http.Handler
	store  *config.Store
	server string
	dir    string
}

func newNodeAPI(t *testing.T, rt wruntime.Runtime) *nodeAPI {
	t.Helper()
	dir := t.TempDir()
	c := config.Defaults()
	c.UUID, c.TokenID, c.Token, c.Remote = uuid.NewString(), "tokenid", testToken, "https://panel.example.com"
	c.PlaceUnder(dir)
	c.System.User.UID, c.System.User.GID = -1, -1
	path := filepath.Join(dir, "config.yml")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	store := config.NewStore(path, c)
	log := slog.New(slog.DiscardHandler)
	mgr := server.NewManager(t.Context(), &server.Deps{Config: store, Log: log})
	id := uuid.NewString()
	def, err := server.ParseDefinition(fmt.Appendf(nil, `{"uuid":%q}`, id), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mgr.Add(def); err != nil {
		t.Fatal(err)
	}
	a := New(Deps{Config: store, Servers: mgr, Log: log, Version: "1.2.3", BootTime: time.Now().Add(-time.Hour),
		Denylist: tokens.NewDenylist(time.Now().Add(-time.Hour)), Runtime: rt, ConfigPath: path})
	n := &nodeAPI{api: a, store: store, server: id, dir: dir}
	n.h = a.Handler()
	return n
}

func (n *nodeAPI) do(method, target, body string) (int, http.Header, []byte) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	rec := do(n.h, method, target, map[string]string{"Authorization": "Bearer " + testToken}, r)
	return rec.Code, rec.Header(), rec.Body.Bytes()
}

func (n *nodeAPI) write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(n.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func decode(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("not JSON: %v: %s", err, body)
	}
	return m
}

const statLine = "cpu  %d 0 %d %d 0 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"

// TestUtilizationShape: the names and units of Pelican Wings'
// system.Utilization (bytes, percent), from the host's /proc files.
func TestUtilizationShape(t *testing.T) {
	n := newNodeAPI(t, nil)
	n.api.paths = &hostinfo.Paths{
		Meminfo: n.write(t, "meminfo", "MemTotal:       16000000 kB\nMemFree:  1000 kB\nMemAvailable:   12000000 kB\nSwapTotal:  2000000 kB\nSwapFree:  1500000 kB\n"),
		Loadavg: n.write(t, "loadavg", "0.50 1.25 2.00 3/400 12345\n"),
		Mounts:  n.write(t, "mounts", "/dev/fake1 / ext4 rw 0 0\n"),
	}
	stat := n.write(t, "stat", fmt.Sprintf(statLine, 100, 100, 800))
	n.api.cpu = &hostinfo.CPUMeter{Path: stat}
	code, _, body := n.do("GET", "/api/system/utilization", "")
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	m := decode(t, body)
	for k, want := range map[string]float64{
		"memory_total": 16000000 * 1024, "memory_used": 4000000 * 1024,
		"swap_total": 2000000 * 1024, "swap_used": 500000 * 1024,
		"load_average1": 0.5, "load_average5": 1.25, "load_average15": 2,
		"cpu_percent": 0, // no time passed in the fake /proc/stat
	} {
		if got, ok := m[k].(float64); !ok || got != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}
	if m["disk_total"].(float64) <= 0 || m["disk_used"].(float64) > m["disk_total"].(float64) {
		t.Errorf("disk_total %v, disk_used %v", m["disk_total"], m["disk_used"])
	}
	details := m["disk_details"].([]any)
	if len(details) == 0 {
		t.Fatalf("no disk_details: %s", body)
	}
	d := details[0].(map[string]any)
	if d["device"] != "/dev/fake1" || d["mountpoint"] != "/" || !strings.Contains(fmt.Sprint(d["tags"]), "Root") {
		t.Errorf("disk_details[0] = %v", d)
	}

	// 300 busy of 1000 jiffies since the previous call: 30%.
	n.write(t, "stat", fmt.Sprintf(statLine, 250, 250, 1500))
	_, _, body = n.do("GET", "/api/system/utilization", "")
	if got := decode(t, body)["cpu_percent"]; got != 30.0 {
		t.Errorf("cpu_percent = %v, want 30", got)
	}
}

type fakeEngine struct {
	wruntime.Runtime
	info   wruntime.EngineInfo
	report wruntime.PruneReport
	err    error
}

func (f *fakeEngine) EngineInfo(context.Context) (wruntime.EngineInfo, error) { return f.info, f.err }
func (f *fakeEngine) PruneImages(context.Context) (wruntime.PruneReport, error) {
	return f.report, f.err
}

// TestSystemV2Shape: GET /api/system?v=2 answers Wings' system.Information;
// without v=2 the v1 shape stays.
func TestSystemV2Shape(t *testing.T) {
	n := newNodeAPI(t, &fakeEngine{info: wruntime.EngineInfo{
		Version: "27.3.1", CgroupDriver: "systemd", CgroupVersion: "2", Containers: 5, Running: 3, Paused: 0, Stopped: 2,
		StorageDriver: "overlay2", BackingFilesystem: "extfs", RuncVersion: "v1.1.14", MemoryBytes: 8 << 30,
	}})
	code, _, body := n.do("GET", "/api/system?v=2", "")
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	var got systemInfoV2
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	d := got.Docker
	if got.Version != "1.2.3" || d.Version != "27.3.1" || d.Containers.Total != 5 || d.Containers.Running != 3 || d.Containers.Stopped != 2 ||
		d.Cgroups.Driver != "systemd" || d.Cgroups.Version != "2" || d.Storage.Driver != "overlay2" || d.Storage.Filesystem != "extfs" ||
		d.Runc.Version != "v1.1.14" || got.System.MemoryBytes != 8<<30 || got.System.CPUThreads < 1 || got.System.OSType != "linux" ||
		got.System.KernelVersion == "" || got.System.Architecture == "" {
		t.Errorf("v2 answer: %s", body)
	}
	for _, key := range []string{`"cpu_threads"`, `"memory_bytes"`, `"os_type"`, `"containers":{"total"`, `"runc":{"version"`} {
		if !strings.Contains(string(body), key) {
			t.Errorf("v2 answer lacks %s: %s", key, body)
		}
	}
	_, _, body = n.do("GET", "/api/system", "")
	if m := decode(t, body); m["cpu_count"] == nil || m["docker"] != nil {
		t.Errorf("v1 answer changed: %s", body)
	}
	// An engine that does not answer leaves the docker part empty, not a 500.
	n2 := newNodeAPI(t, &fakeEngine{err: errors.New("engine down")})
	if code, _, body := n2.do("GET", "/api/system?v=2", ""); code != 200 || !strings.Contains(string(body), `"cpu_threads"`) {
		t.Errorf("engine down: %d %s", code, body)
	}
}

func TestSystemIPs(t *testing.T) {
	n := newNodeAPI(t, nil)
	code, _, body := n.do("GET", "/api/system/ips", "")
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	var got ipAddresses
	if err := json.Unmarshal(body, &got); err != nil || got.IPAddresses == nil {
		t.Fatalf("answer %s (%v), want {\"ip_addresses\": [...]}", body, err)
	}
	for _, s := range got.IPAddresses {
		ip := net.ParseIP(s)
		if ip == nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
			t.Errorf("listed %q", s)
		}
	}
}

// TestInstallLogs: `data` is what follows the script-output header (Wharf's
// or Pelican Wings'); no log is a 404 JSON error.
func TestInstallLogs(t *testing.T) {
	n := newNodeAPI(t, nil)
	target := "/api/servers/" + n.server + "/install-logs"
	code, _, body := n.do("GET", target, "")
	if code != 404 || decode(t, body)["error"] == nil {
		t.Fatalf("no log: %d %s, want a 404 JSON error", code, body)
	}
	dir := filepath.Join(n.store.Get().System.LogDirectory, "install")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ log, want string }{
		"wharf":   {"Wharf installation log\n\nEnvironment variables:\n  SECRET=1\n\nScript output:\nline 1\nline 2\n", "line 1\nline 2\n"},
		"pelican": {"Pterodactyl Server Installation Log\n|\n| Script Output\n| ------------------------------\ndone\n", "done\n"},
		"other":   {"just text\n", "just text\n"},
	} {
		if err := os.WriteFile(filepath.Join(dir, n.server+".log"), []byte(tc.log), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, body := n.do("GET", target, "")
		if code != 200 || decode(t, body)["data"] != tc.want {
			t.Errorf("%s: %d %s, want data %q", name, code, body, tc.want)
		}
	}
	if code, _, _ := n.do("GET", "/api/servers/"+uuid.NewString()+"/install-logs", ""); code != 404 {
		t.Errorf("unknown server: %d", code)
	}
}

// TestPruneImagesShape: Docker's prune report as Pelican's
// PruneImagesCommand reads it (ImagesDeleted null when nothing went).
func TestPruneImagesShape(t *testing.T) {
	n := newNodeAPI(t, &fakeEngine{report: wruntime.PruneReport{SpaceReclaimed: 1234, Deleted: []wruntime.DeletedImage{
		{Untagged: "example:old"}, {Deleted: "sha256:abc"},
	}}})
	code, _, body := n.do("DELETE", "/api/system/docker/image/prune", "")
	want := `{"ImagesDeleted":[{"Untagged":"example:old"},{"Deleted":"sha256:abc"}],"SpaceReclaimed":1234}`
	if code != 200 || strings.TrimSpace(string(body)) != want {
		t.Errorf("prune: %d %s, want %s", code, body, want)
	}
	empty := newNodeAPI(t, &fakeEngine{})
	if _, _, body := empty.do("DELETE", "/api/system/docker/image/prune", ""); strings.TrimSpace(string(body)) != `{"ImagesDeleted":null,"SpaceReclaimed":0}` {
		t.Errorf("nothing pruned: %s", body)
	}
	none := newNodeAPI(t, nil)
	if code, _, body := none.do("DELETE", "/api/system/docker/image/prune", ""); code != 404 || decode(t, body)["error"] == nil {
		t.Errorf("no runtime: %d %s", code, body)
	}
	if code, _, _ := none.do("GET", "/api/system/docker/image/prune", ""); code != 405 {
		t.Errorf("GET prune: %d, want 405", code)
	}
}

// TestWSDenyRequest: 204 as Wings; the jti's tokens issued until then are
// refused; bad bodies are 400 JSON errors.
func TestWSDenyRequest(t *testing.T) {
	n := newNodeAPI(t, nil)
	target := "/api/servers/" + n.server + "/ws/deny"
	if code, _, body := n.do("POST", target, `{"jtis":["aaaa","bbbb"]}`); code != 204 {
		t.Fatalf("deny: %d %s", code, body)
	}
	iat := time.Now().Add(-time.Minute)
	claims := &tokens.WebsocketClaims{UserUUID: "u", ServerUUID: n.server, JTI: "aaaa", IssuedAt: iat, ExpiresAt: iat.Add(10 * time.Minute)}
	if err := n.api.Denylist.CheckWebsocket(claims); !errors.Is(err, tokens.ErrDenied) {
		t.Errorf("denied jti: %v", err)
	}
	claims.JTI = "cccc"
	if err := n.api.Denylist.CheckWebsocket(claims); err != nil {
		t.Errorf("other jti: %v", err)
	}
	for _, body := range []string{`{"jtis":"aaaa"}`, `{"jtis":[""]}`, `{"jtis":["` + strings.Repeat("x", 300) + `"]}`, `not json`, `{"jtis":[1]}`} {
		code, _, out := n.do("POST", target, body)
		if code != 400 || decode(t, out)["error"] == nil {
			t.Errorf("%.40s: %d %s, want a 400 JSON error", body, code, out)
		}
	}
	if code, _, _ := n.do("POST", target, `{}`); code != 204 {
		t.Errorf("no jtis: %d, want 204 as Wings", code)
	}
	if code, _, _ := n.do("POST", "/api/servers/"+uuid.NewString()+"/ws/deny", `{"jtis":["a"]}`); code != 404 {
		t.Errorf("unknown server: %d", code)
	}
}

// TestDiagnosticsEndpoint: the CLI's report as text/plain, without the node
// token; include_logs=false leaves the log section out.
func TestDiagnosticsEndpoint(t *testing.T) {
	n := newNodeAPI(t, nil)
	code, h, body := n.do("GET", "/api/diagnostics?include_logs=false", "")
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		t.Fatalf("%d %s: %s", code, h.Get("Content-Type"), body)
	}
	report := string(body)
	if strings.Contains(report, testToken) || !strings.Contains(report, "Wharf diagnostics") || !strings.Contains(report, "1.2.3") {
		t.Errorf("report:\n%s", report)
	}
	if strings.Contains(report, "log lines ==") {
		t.Errorf("include_logs=false printed logs:\n%s", report)
	}
	_, _, body = n.do("GET", "/api/diagnostics?log_lines=9999", "")
	if !strings.Contains(string(body), "Last 500 log lines") {
		t.Errorf("log_lines is not capped at 500:\n%s", body)
	}
}
