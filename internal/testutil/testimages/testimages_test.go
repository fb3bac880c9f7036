package testimages

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
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
	resp, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: img, Cmd: cmd}, HostConfig: &container.HostConfig{NetworkMode: "none"}, Name: name,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cli.ContainerRemove(context.Background(), resp.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := cli.ContainerStart(ctx, resp.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	wr := cli.ContainerWait(ctx, resp.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-wr.Result:
	case err := <-wr.Error:
		t.Fatal(err)
	}
	rc, err := cli.ContainerLogs(ctx, resp.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
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
