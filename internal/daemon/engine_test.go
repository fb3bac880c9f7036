package daemon

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/config"
)

// rootlessEngine serves, on a unix socket, the answers of a rootless Podman
// 4.3 to the requests the runtime makes at connection (/_ping, /version,
// /info): rootful Podman's answers as recorded on this host, with
// "name=rootless" added to the security options as Podman's compatible
// /info does when it runs rootless (pkg/api/handlers/compat/info.go). A
// stand-in for the engine's answers only, not a runtime: the check under
// test is Wharf's. It returns the docker.host address.
func rootlessEngine(t *testing.T, cgroup string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "podman.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.41")
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/_ping"):
			_, _ = io.WriteString(w, "OK")
		case strings.HasSuffix(r.URL.Path, "/version"):
			_ = json.NewEncoder(w).Encode(map[string]any{
				"Version": "4.3.1", "ApiVersion": "1.41", "MinAPIVersion": "1.24",
				"Components": []map[string]string{{"Name": "Podman Engine", "Version": "4.3.1"}},
			})
		case strings.HasSuffix(r.URL.Path, "/info"):
			_ = json.NewEncoder(w).Encode(map[string]any{
				"ServerVersion": "4.3.1", "CgroupVersion": cgroup, "CgroupDriver": "cgroupfs",
				"SecurityOptions": []string{"name=seccomp,profile=default", "name=rootless"},
			})
		default:
			http.NotFound(w, r)
		}
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "unix://" + sock
}

// TestRootlessCgroupV1Refused: a rootless engine on cgroup v1 stops the
// boot with an error that says why and names the override; the override
// lets it through (with a warning), and cgroup v2 needs none.
func TestRootlessCgroupV1Refused(t *testing.T) {
	cfg := config.Defaults()
	cfg.PlaceUnder(t.TempDir())
	cfg.Docker.Host = rootlessEngine(t, "1")
	cfg.Docker.RootlessWithoutFirewallAccepted = true // TestRootlessWithoutFirewallRefused
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	rt, err := newRuntime(context.Background(), cfg, log)
	if err == nil || !strings.Contains(err.Error(), "rootless on a cgroup v1 host") || !strings.Contains(err.Error(), "docker.rootless_cgroup_v1_accepted") {
		t.Fatalf("newRuntime = %v, %v; want the rootless cgroup v1 refusal", rt, err)
	}
	if !strings.Contains(logs.String(), "subuid") || !strings.Contains(logs.String(), "system.root_directory") {
		t.Errorf("the log does not say what a rootless engine needs:\n%s", logs.String())
	}

	cfg.Docker.RootlessCgroupV1Accepted = true
	logs.Reset()
	rt, err = newRuntime(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("with the override: %v", err)
	}
	_ = rt.(interface{ Close() error }).Close()
	if !strings.Contains(logs.String(), "WITHOUT memory, CPU and process limits") {
		t.Errorf("no warning with the override:\n%s", logs.String())
	}

	cfg.Docker.RootlessCgroupV1Accepted = false
	cfg.Docker.Host = rootlessEngine(t, "2")
	rt, err = newRuntime(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("rootless on cgroup v2: %v", err)
	}
	_ = rt.(interface{ Close() error }).Close()
}

// TestRootlessWithoutFirewallRefused: a rootless engine (on cgroup v2,
// so the limits are there) stops the boot with an error that names the
// protections it lacks and the override; the override lets it through
// with a warning at every boot.
func TestRootlessWithoutFirewallRefused(t *testing.T) {
	cfg := config.Defaults()
	cfg.PlaceUnder(t.TempDir())
	cfg.Docker.Host = rootlessEngine(t, "2")
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	rt, err := newRuntime(context.Background(), cfg, log)
	if err == nil || !strings.Contains(err.Error(), "metadata endpoint") || !strings.Contains(err.Error(), "docker.rootless_without_firewall_accepted") {
		t.Fatalf("newRuntime = %v, %v; want the rootless firewall refusal", rt, err)
	}
	cfg.Docker.RootlessWithoutFirewallAccepted = true
	logs.Reset()
	rt, err = newRuntime(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("with the override: %v", err)
	}
	_ = rt.(interface{ Close() error }).Close()
	if !strings.Contains(logs.String(), "WITHOUT Wharf's firewall") {
		t.Errorf("no warning with the override:\n%s", logs.String())
	}
}
