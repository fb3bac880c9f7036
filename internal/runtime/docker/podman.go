package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/moby/profiles/seccomp"
	"golang.org/x/sync/errgroup"

	"github.com/wharf/wharf/internal/atomicfile"
	"github.com/wharf/wharf/internal/runtime"
)

// Engine names as EngineInfo.Name reports them.
const (
	EngineDocker = "Docker"
	EnginePodman = "Podman"
)

// engine is what New found out about the engine behind the socket (issue
// 37): the choices that differ between Docker and Podman's
// Docker-compatible service hang on it.
type engine struct {
	name     string // EngineDocker or EnginePodman
	version  string
	rootless bool
	cgroupV1 bool
}

func (e engine) podman() bool { return e.name == EnginePodman }

// detectEngine asks GET /version for its components (Podman names its own
// "Podman Engine") and GET /info for rootless mode and the cgroup version.
func detectEngine(ctx context.Context, cli *client.Client) (engine, error) {
	// Both at once (issue 38, the boot): /info alone takes a second on a
	// busy Docker 20.10.
	var v client.ServerVersionResult
	var res client.SystemInfoResult
	var g errgroup.Group
	g.Go(func() (err error) {
		if v, err = cli.ServerVersion(ctx, client.ServerVersionOptions{}); err != nil {
			err = fmt.Errorf("docker: version: %w", err)
		}
		return err
	})
	g.Go(func() (err error) {
		if res, err = cli.Info(ctx, client.InfoOptions{}); err != nil {
			err = fmt.Errorf("docker: info: %w", err)
		}
		return err
	})
	if err := g.Wait(); err != nil {
		return engine{}, err
	}
	e := engine{name: engineName(v), version: v.Version}
	e.cgroupV1 = res.Info.CgroupVersion == "1"
	e.rootless = hasSecurityOption(res.Info.SecurityOptions, "rootless")
	return e, nil
}

// podmanRootless asks Podman's own /info whether it runs rootless: the
// compatible /info of Podman 4.3.1 does not say so (its security options
// lack "name=rootless" on a rootless service, seen on Debian's 4.3.1),
// Podman's own has host.security.rootless.
func (r *Runtime) podmanRootless(ctx context.Context) (bool, error) {
	var info struct {
		Host struct {
			Security struct {
				Rootless bool `json:"rootless"`
			} `json:"security"`
		} `json:"host"`
	}
	if err := r.libpodGet(ctx, "/info", &info); err != nil {
		return false, fmt.Errorf("podman: info: %w", err)
	}
	return info.Host.Security.Rootless, nil
}

// engineName is EnginePodman when a component of the version answer is
// Podman's engine, else EngineDocker.
func engineName(v client.ServerVersionResult) string {
	for _, c := range v.Components {
		if strings.HasPrefix(strings.ToLower(c.Name), "podman") {
			return EnginePodman
		}
	}
	if strings.Contains(strings.ToLower(v.Platform.Name), "podman") {
		return EnginePodman
	}
	return EngineDocker
}

// hasSecurityOption reports whether an /info security option
// ("name=rootless", "name=seccomp,profile=default") has that name.
func hasSecurityOption(opts []string, name string) bool {
	for _, o := range opts {
		for _, kv := range strings.Split(o, ",") {
			if kv == "name="+name {
				return true
			}
		}
	}
	return false
}

// Name is the engine's name (EngineDocker or EnginePodman).
func (r *Runtime) Name() string { return r.eng.name }

// Facts is what New found out about the engine, without asking it again
// (Podman's /info waits for its storage lock, seconds on a busy engine).
func (r *Runtime) Facts() runtime.EngineFacts {
	cg := "2"
	if r.eng.cgroupV1 {
		cg = "1"
	}
	return runtime.EngineFacts{Name: r.eng.name, Version: r.eng.version, Rootless: r.eng.rootless, CgroupVersion: cg}
}

// Rootless reports whether the engine runs without root (a rootless
// Podman or Docker): it checks bind-mount sources as its own user.
func (r *Runtime) Rootless() bool { return r.eng.rootless }

// podmanLogDriver is the log driver given to containers on Podman, which
// refuses Docker's "local": its own file format, which honours a size
// bound (max-size becomes conmon's log size limit; max-file, compress and
// mode are Docker's and left out).
const podmanLogDriver = "k8s-file"

// podmanDefaultLogSize bounds a container's log on Podman when the
// configuration names none.
const podmanDefaultLogSize = "5m"

// podmanLogConfig maps the configured log driver onto one Podman accepts:
// Docker's "local" and "json-file" become k8s-file with the configured
// max-size; the drivers Podman has ("k8s-file", "journald", "none",
// "passthrough") are kept as they are.
func podmanLogConfig(typ string, cfg map[string]string) (string, map[string]string) {
	switch typ {
	case "k8s-file", "journald", "none", "passthrough":
		return typ, cfg
	}
	size := cfg["max-size"]
	if size == "" {
		size = podmanDefaultLogSize
	}
	return podmanLogDriver, map[string]string{"max-size": size}
}

// podmanTmpfs adds size-bounded tmpfs at /run and /var/tmp to a read-only
// container's tmpfs: Podman mounts unbounded writable ones there itself
// (its read-only-tmpfs default, which the compatible API cannot turn off)
// unless the container names its own. They get the options of the
// container's /tmp (the node's tmpfs size), else 64 MiB.
func podmanTmpfs(tmpfs map[string]string) map[string]string {
	out := make(map[string]string, len(tmpfs)+2)
	for k, v := range tmpfs {
		out[k] = v
	}
	opts := tmpfs["/tmp"]
	if opts == "" {
		opts = "rw,nosuid,nodev,size=64m"
	}
	for _, dir := range []string{"/run", "/var/tmp"} {
		if _, ok := out[dir]; !ok {
			out[dir] = opts
		}
	}
	return out
}

// seccompProfiles writes the profiles Podman is given as files (it reads
// security-opt seccomp=… as a path, where Docker takes the profile inline)
// under dir, atomically and named by their content, once per runtime.
type seccompProfiles struct {
	dir string
	mu  sync.Mutex
	// written maps a profile's content hash to its path.
	written map[string]string
}

// path returns the file holding profile (JSON), writing it when needed.
func (p *seccompProfiles) path(kind, profile string) (string, error) {
	if p.dir == "" {
		return "", errors.New("seccomp: no directory for Podman's profile files (docker.Options.StateDir)")
	}
	sum := sha256.Sum256([]byte(profile))
	key := hex.EncodeToString(sum[:8])
	p.mu.Lock()
	defer p.mu.Unlock()
	if path, ok := p.written[key]; ok {
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return "", fmt.Errorf("seccomp: %w", err)
	}
	path := filepath.Join(p.dir, "seccomp-"+kind+"-"+key+".json")
	if err := atomicfile.WriteFile(path, []byte(profile), 0o644); err != nil {
		return "", fmt.Errorf("seccomp: %w", err)
	}
	if p.written == nil {
		p.written = map[string]string{}
	}
	p.written[key] = path
	return path, nil
}

// defaultSeccompProfile is Docker's default profile, given on Podman to
// every container that gets no other profile: Podman's own allows
// unshare(CLONE_NEWUSER) and keyctl, which Docker's refuses.
var defaultSeccompProfile = sync.OnceValues(func() (string, error) {
	b, err := json.Marshal(seccomp.DefaultProfile())
	return string(b), err
})

// libpodGet GETs a path of Podman's own API (/libpod/…) on the engine's
// socket and decodes the JSON answer into out.
func (r *Runtime) libpodGet(ctx context.Context, path string, out any) error {
	return r.libpodDo(ctx, http.MethodGet, path, out)
}

// podmanInit initialises a created container (Podman's init route) and
// returns the engine's own error text when that fails: Podman initialises
// the container at attach and answers a failure there with a bare 409,
// which the hijacked attach request cannot read.
func (r *Runtime) podmanInit(ctx context.Context, name string) error {
	return r.libpodDo(ctx, http.MethodPost, "/containers/"+url.PathEscape(name)+"/init", nil)
}

// libpodDo sends a request without a body to Podman's own API and decodes
// a JSON answer into out (when not nil).
func (r *Runtime) libpodDo(ctx context.Context, method, path string, out any) error {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return r.cli.Dialer()(ctx) },
	}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, method, "http://podman/v4.0.0/libpod"+path, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %s", runtime.ErrNotFound, libpodMessage(body))
	}
	if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusNotModified {
		return fmt.Errorf("podman: %s", libpodMessage(body))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(body, out)
}

// libpodMessage is the message of a Podman error answer, else the body.
func libpodMessage(body []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		return e.Message
	}
	return strings.TrimSpace(string(body))
}

// podmanBridgeName is the host interface of a Podman network: its
// compatible inspect does not say, Podman's own does.
func (r *Runtime) podmanBridgeName(ctx context.Context, name string) (string, error) {
	var nw struct {
		Driver           string `json:"driver"`
		NetworkInterface string `json:"network_interface"`
	}
	if err := r.libpodGet(ctx, "/networks/"+url.PathEscape(name)+"/json", &nw); err != nil {
		return "", err
	}
	if nw.Driver != "bridge" {
		return "", nil
	}
	return nw.NetworkInterface, nil
}

// podmanHostConfig adapts a create request built for Docker to Podman: a
// log driver it accepts (with the size bound), the seccomp profile as a
// file (Docker's default where none is given: Podman's own is weaker),
// bounded tmpfs where a read-only container would get unbounded ones, and
// no OomKillDisable (crun refuses it on cgroup v2, even false).
func podmanHostConfig(h *container.HostConfig, profiles *seccompProfiles) error {
	typ, cfg := h.LogConfig.Type, h.LogConfig.Config
	if typ == "" {
		typ = "local"
	}
	typ, cfg = podmanLogConfig(typ, cfg)
	h.LogConfig = container.LogConfig{Type: typ, Config: cfg}
	h.OomKillDisable = nil

	hasSeccomp := false
	for i, o := range h.SecurityOpt {
		profile, ok := strings.CutPrefix(o, "seccomp=")
		if !ok {
			continue
		}
		hasSeccomp = true
		if !strings.HasPrefix(strings.TrimSpace(profile), "{") {
			continue // a path or "unconfined" already
		}
		path, err := profiles.path("quota", profile)
		if err != nil {
			return err
		}
		h.SecurityOpt[i] = "seccomp=" + path
	}
	if !hasSeccomp {
		profile, err := defaultSeccompProfile()
		if err != nil {
			return err
		}
		path, err := profiles.path("default", profile)
		if err != nil {
			return err
		}
		h.SecurityOpt = append(h.SecurityOpt, "seccomp="+path)
	}
	if h.ReadonlyRootfs {
		h.Tmpfs = podmanTmpfs(h.Tmpfs)
	}
	return nil
}
