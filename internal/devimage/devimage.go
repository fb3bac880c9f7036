// Package devimage builds the small images Wharf runs without a registry:
// a FROM-scratch static busybox, and the fake game server of
// internal/testutil/gameserver (compiled with the Go toolchain) on top of it.
// The tests use them (through internal/testutil/testimages) and so does
// `wharf dev`, whose example server runs the game server image.
//
// Builds go through the Docker API (no docker CLI) with an in-memory build
// context and the classic builder, which Docker Engine 20.10 and current
// releases both have. A build is skipped when an image with the same tag and
// the same content hash label already exists.
package devimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"
)

const (
	// GameServerPath is the game server binary's path inside its image
	// (also the image's entrypoint).
	GameServerPath = "/usr/local/bin/gameserver"
	// GameServerPackage is the Go package of the fake game server.
	GameServerPackage = "github.com/wharf/wharf/internal/testutil/gameserver"

	hashLabel   = "wharf.test.content-hash"
	hostBusybox = "/bin/busybox"
	busyboxHint = "install the static busybox: apt-get install busybox-static"
)

// buildMu serialises builds within one process; built remembers the tags
// already checked or built by this process.
var (
	buildMu sync.Mutex
	built   = map[string]bool{}
)

// Client is the Docker client the builders take. It is an alias so that a
// caller (dev mode) needs no import of the Docker SDK: only this package,
// runtime/docker and the test helpers import it (internal/deptest).
type Client = client.Client

// NewClient returns a Docker client (environment settings, API version
// negotiated) after checking that the engine answers. A non-empty host
// (docker.host: Docker's or Podman's socket) overrides DOCKER_HOST.
func NewClient(ctx context.Context, host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("ping %s: %w", cli.DaemonHost(), err)
	}
	return cli, nil
}

const busyboxDockerfile = `FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN ["/bin/busybox", "sh", "-c", "mkdir -p /tmp /home/container && chmod 1777 /tmp"]
`

// Busybox builds (once) an image FROM scratch holding the host's static
// /bin/busybox with its applet links in /bin, tagged tag.
func Busybox(ctx context.Context, cli *client.Client, tag string) error {
	bb, err := readStaticBusybox()
	if err != nil {
		return err
	}
	df := busyboxDockerfile + "WORKDIR /home/container\nCMD [\"/bin/sh\"]\n"
	return ensureImage(ctx, cli, tag, df, []file{{"busybox", bb}})
}

// GameServer builds (once) an image FROM scratch with the fake game server
// (compiled statically from GameServerPackage; the current directory must be
// inside the wharf module) as its entrypoint, busybox for a shell, and
// /home/container as the working directory, tagged tag.
func GameServer(ctx context.Context, cli *client.Client, tag string) error {
	bb, err := readStaticBusybox()
	if err != nil {
		return err
	}
	gs, err := buildGameServer(ctx)
	if err != nil {
		return err
	}
	df := busyboxDockerfile + "COPY gameserver " + GameServerPath + `
WORKDIR /home/container
ENTRYPOINT ["` + GameServerPath + `"]
`
	return ensureImage(ctx, cli, tag, df, []file{{"busybox", bb}, {"gameserver", gs}})
}

// Exists reports whether an image with this tag is present.
func Exists(ctx context.Context, cli *client.Client, tag string) (bool, error) {
	_, err := cli.ImageInspect(ctx, tag)
	if err == nil {
		return true, nil
	}
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return false, err
}

type file struct {
	name string
	data []byte
}

// readStaticBusybox returns the host's /bin/busybox, which must be a
// statically linked executable (it runs in an image without libc).
func readStaticBusybox() ([]byte, error) {
	data, err := os.ReadFile(hostBusybox)
	if err != nil {
		return nil, fmt.Errorf("devimage: %s is needed to build the images: %w; %s", hostBusybox, err, busyboxHint)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("devimage: %s is not an ELF executable: %w; %s", hostBusybox, err, busyboxHint)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("devimage: %s is dynamically linked and cannot run FROM scratch; %s", hostBusybox, busyboxHint)
		}
	}
	return data, nil
}

// buildGameServer compiles the game server statically for linux/GOARCH.
func buildGameServer(ctx context.Context) ([]byte, error) {
	dir, err := os.MkdirTemp("", "wharf-gameserver-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "gameserver")
	goBin := "go"
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			goBin = p
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, GameServerPackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("devimage: go build %s (run from inside the wharf source tree): %w\n%s", GameServerPackage, err, msg)
	}
	return os.ReadFile(out)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ensureImage builds tag from dockerfile and files unless an image with that
// tag and the same content hash already exists.
func ensureImage(ctx context.Context, cli *client.Client, tag, dockerfile string, files []file) error {
	sum := contentHash(dockerfile, files)

	buildMu.Lock()
	defer buildMu.Unlock()
	if built[tag+"@"+sum] {
		return nil
	}

	var oldID string
	insp, err := cli.ImageInspect(ctx, tag)
	switch {
	case err == nil:
		if insp.Config != nil && insp.Config.Labels[hashLabel] == sum {
			built[tag+"@"+sum] = true
			return nil
		}
		oldID = insp.ID
	case !cerrdefs.IsNotFound(err):
		return fmt.Errorf("devimage: inspect %s: %w", tag, err)
	}

	buildCtx, err := tarContext(dockerfile, files)
	if err != nil {
		return fmt.Errorf("devimage: build context: %w", err)
	}
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	resp, err := cli.ImageBuild(bctx, buildCtx, client.ImageBuildOptions{
		Tags:        []string{tag},
		Labels:      map[string]string{hashLabel: sum},
		Remove:      true,
		ForceRemove: true,
		NetworkMode: "none",
		Version:     build.BuilderV1,
	})
	if err != nil {
		return fmt.Errorf("devimage: build %s: %w", tag, err)
	}
	defer resp.Body.Close()
	if err := readBuildOutput(resp.Body); err != nil {
		return fmt.Errorf("devimage: build %s: %w", tag, err)
	}
	built[tag+"@"+sum] = true

	// The previous build of this tag is now untagged: remove it so that
	// rebuilds after a source change do not pile up dangling images.
	if oldID != "" {
		if insp, err := cli.ImageInspect(ctx, tag); err == nil && insp.ID != oldID {
			_, _ = cli.ImageRemove(ctx, oldID, client.ImageRemoveOptions{PruneChildren: true})
		}
	}
	return nil
}

func contentHash(dockerfile string, files []file) string {
	h := sha256.New()
	fmt.Fprintf(h, "Dockerfile\x00%d\x00%s", len(dockerfile), dockerfile)
	sorted := append([]file(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	for _, f := range sorted {
		fmt.Fprintf(h, "%s\x00%d\x00", f.name, len(f.data))
		h.Write(f.data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func tarContext(dockerfile string, files []file) (io.Reader, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, data []byte) error {
		hdr := &tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := add("Dockerfile", 0o644, []byte(dockerfile)); err != nil {
		return nil, err
	}
	for _, f := range files {
		if err := add(f.name, 0o755, f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}

// readBuildOutput drains the build's JSON message stream and returns the
// first error it reports, with the build log for context.
func readBuildOutput(r io.Reader) error {
	dec := json.NewDecoder(r)
	var log strings.Builder
	for {
		var msg struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading build output: %w", err)
		}
		if log.Len() < 64<<10 {
			log.WriteString(msg.Stream)
		}
		if msg.ErrorDetail != nil && msg.ErrorDetail.Message != "" {
			return fmt.Errorf("%s\n%s", msg.ErrorDetail.Message, log.String())
		}
		if msg.Error != "" {
			return fmt.Errorf("%s\n%s", msg.Error, log.String())
		}
	}
}
