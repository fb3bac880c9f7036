package docker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/runtime"
)

func TestEngineName(t *testing.T) {
	podman := client.ServerVersionResult{Components: []system.ComponentVersion{{Name: "Podman Engine", Version: "4.3.1"}, {Name: "Conmon"}}}
	docker := client.ServerVersionResult{Platform: client.PlatformInfo{Name: "Docker Engine - Community"}, Components: []system.ComponentVersion{{Name: "Engine"}, {Name: "containerd"}, {Name: "runc"}}}
	if got := engineName(podman); got != EnginePodman {
		t.Errorf("Podman's /version: %s", got)
	}
	if got := engineName(docker); got != EngineDocker {
		t.Errorf("Docker's /version: %s", got)
	}
	if !hasSecurityOption([]string{"name=seccomp,profile=default", "name=rootless"}, "rootless") || hasSecurityOption([]string{"name=seccomp,profile=rootless"}, "rootless") {
		t.Error("rootless security option misread")
	}
}

func TestPodmanLogConfig(t *testing.T) {
	for _, tt := range []struct {
		typ      string
		cfg      map[string]string
		wantType string
		wantSize string
	}{
		{"local", map[string]string{"max-size": "5m", "max-file": "1", "compress": "false", "mode": "non-blocking"}, "k8s-file", "5m"},
		{"json-file", map[string]string{"max-size": "20m"}, "k8s-file", "20m"},
		{"local", nil, "k8s-file", podmanDefaultLogSize},
		{"journald", nil, "journald", ""},
		{"none", nil, "none", ""},
	} {
		typ, cfg := podmanLogConfig(tt.typ, tt.cfg)
		if typ != tt.wantType || cfg["max-size"] != tt.wantSize {
			t.Errorf("%s %v -> %s %v, want %s max-size %q", tt.typ, tt.cfg, typ, cfg, tt.wantType, tt.wantSize)
		}
		if typ == "k8s-file" && len(cfg) != 1 {
			t.Errorf("%s: options Podman does not know are kept: %v", tt.typ, cfg)
		}
	}
}

// TestPodmanHostConfig: on Podman the inline profile becomes a file with the
// same content, a container without one gets Docker's default as a file,
// read-only containers get bounded /run and /var/tmp, OomKillDisable goes.
func TestPodmanHostConfig(t *testing.T) {
	profiles := &seccompProfiles{dir: t.TempDir()}
	spec := runtime.ContainerSpec{
		Name: "x", Image: "img", Hardened: true, QuotaLocked: true,
		Tmpfs:     map[string]string{"/tmp": "rw,exec,nosuid,size=100M"},
		LogConfig: runtime.LogConfig{Type: "local", Config: map[string]string{"max-size": "5m"}},
	}
	_, h, err := containerConfig(spec)
	if err != nil {
		t.Fatal(err)
	}
	inline := ""
	for _, o := range h.SecurityOpt {
		if p, ok := strings.CutPrefix(o, "seccomp="); ok {
			inline = p
		}
	}
	if err := podmanHostConfig(h, profiles); err != nil {
		t.Fatal(err)
	}
	path := seccompOpt(t, h)
	if b, err := os.ReadFile(path); err != nil || string(b) != inline {
		t.Fatalf("profile file %s: %v (same content as the inline profile: %v)", path, err, string(b) == inline)
	}
	if h.OomKillDisable != nil || h.LogConfig.Type != "k8s-file" || h.LogConfig.Config["max-size"] != "5m" {
		t.Errorf("OomKillDisable %v, log %+v", h.OomKillDisable, h.LogConfig)
	}
	for _, dir := range []string{"/run", "/var/tmp"} {
		if !strings.Contains(h.Tmpfs[dir], "size=100M") {
			t.Errorf("tmpfs %s = %q, want bounded like /tmp", dir, h.Tmpfs[dir])
		}
	}

	h2 := &container.HostConfig{}
	if err := podmanHostConfig(h2, profiles); err != nil {
		t.Fatal(err)
	}
	var p struct {
		DefaultAction string `json:"defaultAction"`
	}
	b, err := os.ReadFile(seccompOpt(t, h2))
	if err != nil || json.Unmarshal(b, &p) != nil || p.DefaultAction != "SCMP_ACT_ERRNO" {
		t.Fatalf("default profile file: %v %q", err, p.DefaultAction)
	}
	if len(h2.Tmpfs) != 0 {
		t.Errorf("a writable container got tmpfs %v", h2.Tmpfs)
	}

	if err := podmanHostConfig(&container.HostConfig{}, &seccompProfiles{}); err == nil {
		t.Error("no state directory: no error")
	}
}

func seccompOpt(t *testing.T, h *container.HostConfig) string {
	t.Helper()
	n := 0
	path := ""
	for _, o := range h.SecurityOpt {
		if p, ok := strings.CutPrefix(o, "seccomp="); ok {
			n++
			path = p
		}
	}
	if n != 1 || !strings.HasPrefix(path, "/") {
		t.Fatalf("security options %v: want one seccomp= file path", h.SecurityOpt)
	}
	return path
}

func TestPodmanMessages(t *testing.T) {
	if !isPoolOverlap(errors.New("Error response from daemon: subnet 172.18.0.0/16 is already used on the host or by another config")) {
		t.Error("Podman's subnet message is not an overlap")
	}
	if !isNotRunning(errors.New("Error response from daemon: can only kill running containers. abc is in state exited: container state improper")) {
		t.Error("Podman's kill of an exited container is not 'not running'")
	}
	if !isPodmanContainerRace(errors.New(`Error response from daemon: getting container from store "430cca6d": container not known`)) || isPodmanContainerRace(errors.New("network wharf not found")) {
		t.Error("Podman's network inspect race")
	}
	id := strings.Repeat("ab", 32)
	if imageID(id) != "sha256:"+id || imageID("sha256:"+id) != "sha256:"+id || imageID("short") != "short" {
		t.Error("image ids")
	}
}

// TestAttachFailureNamesTheEngineError: when the container cannot be set
// up (here its bind source vanished after the create), the error of the
// attach, which reaches the server's console, carries the engine's own
// words, not "unable to upgrade to tcp, received 409" (Podman initialises
// the container at attach). On Docker the attach succeeds and the start
// fails with the engine's words.
func TestAttachFailureNamesTheEngineError(t *testing.T) {
	r := newRuntime(t)
	ctx := context.Background()
	spec := gameServerSpec(t, r, "attachfail")
	src := filepath.Join(t.TempDir(), "gone")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	spec.Mounts = []runtime.Mount{{Source: src, Target: "/home/container"}}
	if err := r.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	s, err := r.Attach(ctx, spec.Name)
	if err == nil {
		defer s.Close()
		err = r.Start(ctx, spec.Name)
	}
	if err == nil {
		t.Fatal("a container whose bind source is gone was set up")
	}
	msg := err.Error()
	if strings.Contains(msg, "unable to upgrade") || !strings.Contains(msg, "no such file or directory") && !strings.Contains(msg, "does not exist") {
		t.Fatalf("error %q does not carry the engine's reason", err)
	}
}

// podmanAnswers serves, on a unix socket, what rootless Podman 4.3.1 of
// Debian answers to the requests of New (recorded on this host from a
// `podman system service` run by an unprivileged user): its compatible
// /info has no "name=rootless" security option; its own /libpod/info
// says host.security.rootless (libpodRootless). It returns docker.host.
func podmanAnswers(t *testing.T, libpodRootless bool) string {
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
		case strings.HasSuffix(r.URL.Path, "/libpod/info"):
			_ = json.NewEncoder(w).Encode(map[string]any{"host": map[string]any{
				"cgroupVersion": "v1", "security": map[string]any{"rootless": libpodRootless, "seccompEnabled": true}}})
		case strings.HasSuffix(r.URL.Path, "/version"):
			_ = json.NewEncoder(w).Encode(map[string]any{
				"Version": "4.3.1", "ApiVersion": "1.41", "MinAPIVersion": "1.24",
				"Components": []map[string]string{{"Name": "Podman Engine", "Version": "4.3.1"}},
			})
		case strings.HasSuffix(r.URL.Path, "/info"):
			_ = json.NewEncoder(w).Encode(map[string]any{
				"ServerVersion": "4.3.1", "CgroupVersion": "1", "CgroupDriver": "cgroupfs", "Driver": "vfs",
				"SecurityOptions": []string{"name=seccomp,profile=default"},
			})
		default:
			http.NotFound(w, r)
		}
	})
	srv := &http.Server{Handler: mux}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return "unix://" + sock
}

// TestPodmanRootlessFromLibpodInfo: rootless Podman 4.3.1's compatible
// /info does not say it is rootless; New asks Podman's own /info, so a
// rootless Podman is known as one (and a rootful one, the control, is not).
func TestPodmanRootlessFromLibpodInfo(t *testing.T) {
	for _, rootless := range []bool{true, false} {
		rt, err := New(context.Background(), Options{Host: podmanAnswers(t, rootless)})
		if err != nil {
			t.Fatal(err)
		}
		f := rt.Facts()
		rt.Close()
		if f.Name != EnginePodman || f.Rootless != rootless || f.CgroupVersion != "1" {
			t.Errorf("libpod rootless=%v: facts %+v", rootless, f)
		}
	}
}
