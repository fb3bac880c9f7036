package testimages

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

func TestImagesBuildOnceAndRun(t *testing.T) {
	RequireDocker(t)
	ctx := context.Background()
	if got := Busybox(ctx, t); got != BusyboxTag {
		t.Fatalf("Busybox = %q", got)
	}
	if got := GameServer(ctx, t); got != GameServerTag {
		t.Fatalf("GameServer = %q", got)
	}

	// A second request with the same content is a no-op (no rebuild).
	cli := Client(t)
	before, err := cli.ImageInspect(ctx, GameServerTag)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	GameServer(ctx, t)
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("second GameServer call took %v", d)
	}
	after, err := cli.ImageInspect(ctx, GameServerTag)
	if err != nil {
		t.Fatal(err)
	}
	if before.ID != after.ID {
		t.Errorf("image rebuilt: %s -> %s", before.ID, after.ID)
	}

	// Busybox runs with its applet links in place.
	out := runOnce(t, BusyboxTag, []string{"sh", "-c", "echo hello from $(basename $(readlink /bin/sh)); pwd"})
	if !strings.Contains(out, "hello from busybox") || !strings.Contains(out, "/home/container") {
		t.Errorf("busybox output %q", out)
	}
}

// runOnce runs cmd in a new container of img and returns its output.
func runOnce(t *testing.T, img string, cmd []string) string {
	t.Helper()
	cli := Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := "wharf-test-images-" + time.Now().Format("150405.000000")
	resp, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: cmd}, &container.HostConfig{NetworkMode: "none"}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), resp.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	okC, errC := cli.ContainerWait(ctx, resp.ID, container.WaitConditionNotRunning)
	select {
	case <-okC:
	case err := <-errC:
		t.Fatal(err)
	}
	rc, err := cli.ContainerLogs(ctx, resp.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, rc); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}
