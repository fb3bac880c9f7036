// Package testimages builds the Docker images that Docker tests run: a
// FROM-scratch static busybox and the fake game server of
// internal/testutil/gameserver. Builds go through the Docker API (no docker
// CLI) with an in-memory build context and the classic builder, which Docker
// Engine 20.10 and current releases both have. A build is skipped when an
// image with the same tag and the same content hash label already exists, so
// the images are built once per machine and shared by all test packages.
//
// Usage from any package's tests:
//
//	testimages.RequireDocker(t)
//	img := testimages.GameServer(ctx, t) // "wharf-test/gameserver:latest"
//
// The images are deliberately left in place after the tests (they are
// reused); everything else a test creates must be removed by that test.
package testimages

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
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

const (
	// BusyboxTag is the tag of the image Busybox builds.
	BusyboxTag = "wharf-test/busybox:latest"
	// GameServerTag is the tag of the image GameServer builds.
	GameServerTag = "wharf-test/gameserver:latest"
	// GameServerPath is the game server binary's path inside its image
	// (also the image's entrypoint).
	GameServerPath = "/usr/local/bin/gameserver"

	hashLabel       = "wharf.test.content-hash"
	hostBusybox     = "/bin/busybox"
	gameServerPkg   = "github.com/wharf/wharf/internal/testutil/gameserver"
	noDockerMessage = "no Docker engine reachable: start dockerd; make test never skips Docker tests"
)

// buildMu serialises builds within one test binary; built remembers the
// tags already checked or built by this process.
var (
	buildMu sync.Mutex
	built   = map[string]bool{}
)

// Client returns a Docker client (environment settings, API version
// negotiated) that is closed when the test ends. It fails the test when no
// engine answers.
func Client(tb testing.TB) *client.Client {
	tb.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		tb.Fatalf("%s (client: %v)", noDockerMessage, err)
	}
	tb.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		tb.Fatalf("%s (ping %s: %v)", noDockerMessage, cli.DaemonHost(), err)
	}
	cli.NegotiateAPIVersion(ctx)
	return cli
}

// RequireDocker fails the test (it never skips) when no Docker engine
// answers.
func RequireDocker(tb testing.TB) {
	tb.Helper()
	Client(tb)
}

// Busybox builds (once) an image FROM scratch holding the host's static
// /bin/busybox with its applet links in /bin, and returns its tag.
func Busybox(ctx context.Context, tb testing.TB) string {
	tb.Helper()
	bb := readStaticBusybox(tb)
	df := `FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN ["/bin/busybox", "sh", "-c", "mkdir -p /tmp /home/container && chmod 1777 /tmp"]
WORKDIR /home/container
CMD ["/bin/sh"]
`
	ensureImage(ctx, tb, BusyboxTag, df, []file{{"busybox", bb}})
	return BusyboxTag
}

// GameServer builds (once) an image FROM scratch with the fake game server
// (internal/testutil/gameserver, compiled statically) as its entrypoint,
// busybox for a shell, and /home/container as the working directory, and
// returns its tag.
func GameServer(ctx context.Context, tb testing.TB) string {
	tb.Helper()
	bb := readStaticBusybox(tb)
	gs := buildGameServer(ctx, tb)
	df := `FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN ["/bin/busybox", "sh", "-c", "mkdir -p /tmp /home/container && chmod 1777 /tmp"]
COPY gameserver ` + GameServerPath + `
WORKDIR /home/container
ENTRYPOINT ["` + GameServerPath + `"]
`
	ensureImage(ctx, tb, GameServerTag, df, []file{{"busybox", bb}, {"gameserver", gs}})
	return GameServerTag
}

type file struct {
	name string
	data []byte
}

// readStaticBusybox returns the host's /bin/busybox, which must be a
// statically linked executable (it runs in an image without libc).
func readStaticBusybox(tb testing.TB) []byte {
	tb.Helper()
	const hint = "install the static busybox: apt-get install busybox-static"
	data, err := os.ReadFile(hostBusybox)
	if err != nil {
		tb.Fatalf("testimages: %s is needed to build test images: %v; %s", hostBusybox, err, hint)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		tb.Fatalf("testimages: %s is not an ELF executable: %v; %s", hostBusybox, err, hint)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			tb.Fatalf("testimages: %s is dynamically linked and cannot run FROM scratch; %s", hostBusybox, hint)
		}
	}
	return data
}

// buildGameServer compiles the game server statically for linux/GOARCH.
func buildGameServer(ctx context.Context, tb testing.TB) []byte {
	tb.Helper()
	dir := tb.TempDir()
	out := filepath.Join(dir, "gameserver")
	goBin := "go"
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			goBin = p
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, gameServerPkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("testimages: go build %s: %v\n%s", gameServerPkg, err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		tb.Fatalf("testimages: %v", err)
	}
	return data
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ensureImage builds tag from dockerfile and files unless an image with that
// tag and the same content hash already exists.
func ensureImage(ctx context.Context, tb testing.TB, tag, dockerfile string, files []file) {
	tb.Helper()
	sum := contentHash(dockerfile, files)

	buildMu.Lock()
	defer buildMu.Unlock()
	if built[tag+"@"+sum] {
		return
	}
	cli := Client(tb)

	var oldID string
	insp, err := cli.ImageInspect(ctx, tag)
	switch {
	case err == nil:
		if insp.Config != nil && insp.Config.Labels[hashLabel] == sum {
			built[tag+"@"+sum] = true
			return
		}
		oldID = insp.ID
	case !cerrdefs.IsNotFound(err):
		tb.Fatalf("testimages: inspect %s: %v", tag, err)
	}

	buildCtx, err := tarContext(dockerfile, files)
	if err != nil {
		tb.Fatalf("testimages: build context: %v", err)
	}
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	resp, err := cli.ImageBuild(bctx, buildCtx, build.ImageBuildOptions{
		Tags:        []string{tag},
		Labels:      map[string]string{hashLabel: sum},
		Remove:      true,
		ForceRemove: true,
		NetworkMode: "none",
		Version:     build.BuilderV1,
	})
	if err != nil {
		tb.Fatalf("testimages: build %s: %v", tag, err)
	}
	defer resp.Body.Close()
	if err := readBuildOutput(resp.Body); err != nil {
		tb.Fatalf("testimages: build %s: %v", tag, err)
	}
	built[tag+"@"+sum] = true

	// The previous build of this tag is now untagged: remove it so that
	// rebuilds after a source change do not pile up dangling images.
	if oldID != "" {
		if insp, err := cli.ImageInspect(ctx, tag); err == nil && insp.ID != oldID {
			_, _ = cli.ImageRemove(ctx, oldID, image.RemoveOptions{PruneChildren: true})
		}
	}
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
