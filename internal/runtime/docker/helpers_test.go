package docker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/testutil/testimages"
)

// newRuntime returns a Runtime on the local engine, closed at the end of
// the test. It fails (never skips) when no engine answers.
func newRuntime(t *testing.T) *Runtime {
	t.Helper()
	testimages.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := New(ctx, Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// rawClient is a plain Docker client for assertions the runtime does not
// expose (ContainerInspect, NetworkCreate, ImageTag, ...).
func rawClient(t *testing.T) *client.Client {
	t.Helper()
	return testimages.Client(t)
}

// inspectContainer is ContainerInspect's container, or its error.
func inspectContainer(ctx context.Context, cli *client.Client, name string) (container.InspectResponse, error) {
	res, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	return res.Container, err
}

// inspectNetwork is NetworkInspect's network, or its error.
func inspectNetwork(ctx context.Context, cli *client.Client, name string) (network.Inspect, error) {
	res, err := cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	return res.Network, err
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testName returns a unique, short resource name with the wharf-test- prefix.
func testName(label string) string {
	return "wharf-test-" + label + "-" + randHex(4)
}

// gameServerSpec returns a spec for the game server image with a unique
// name; the container is removed when the test ends.
func gameServerSpec(t *testing.T, r *Runtime, label string) runtime.ContainerSpec {
	t.Helper()
	img := testimages.GameServer(context.Background(), t)
	name := testName(label)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Remove(ctx, name, ""); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return runtime.ContainerSpec{
		Name:   name,
		Image:  img,
		Env:    []string{"WHARF_TEST=1"},
		Labels: map[string]string{"Service": "Wharf", "ContainerType": "server_process", "wharf-test": "1"},
		Limits: runtime.Limits{MemoryBytes: 64 << 20, PidsLimit: 64},
	}
}

// console reads an attached stream line by line (lines cut at 4 KiB, so a
// huge line does not grow memory) and hands the lines to the test.
type console struct {
	s     runtime.Stream
	lines chan string
	done  chan struct{}
	err   error
}

func newConsole(t *testing.T, s runtime.Stream) *console {
	c := &console{s: s, lines: make(chan string, 100000), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer close(c.lines)
		br := bufio.NewReaderSize(s, 4096)
		var cur []byte
		for {
			chunk, err := br.ReadSlice('\n')
			if room := 4096 - len(cur); room > 0 {
				cur = append(cur, chunk[:min(len(chunk), room)]...)
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if len(cur) > 0 {
				c.lines <- strings.TrimRight(string(cur), "\r\n")
				cur = cur[:0]
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					c.err = err
				}
				return
			}
		}
	}()
	t.Cleanup(func() {
		s.Close()
		<-c.done
	})
	return c
}

// expect reads lines until one satisfies match, failing after timeout.
// It returns the lines read (the matching one last).
func (c *console) expect(t *testing.T, timeout time.Duration, what string, match func(string) bool) []string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var seen []string
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("stream ended (err %v) before %s; last lines: %q", c.err, what, tail(seen, 10))
			}
			seen = append(seen, l)
			if match(l) {
				return seen
			}
		case <-deadline.C:
			t.Fatalf("no %s within %v; last lines: %q", what, timeout, tail(seen, 10))
		}
	}
}

func (c *console) expectLine(t *testing.T, line string) []string {
	t.Helper()
	return c.expect(t, 20*time.Second, "line "+strconvQuote(line), func(l string) bool { return l == line })
}

// waitEnd waits until the stream ends.
func (c *console) waitEnd(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-c.lines:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("stream did not end within %v", timeout)
		}
	}
}

func (c *console) send(t *testing.T, cmd string) {
	t.Helper()
	if _, err := io.WriteString(c.s, cmd+"\n"); err != nil {
		t.Fatalf("write %q: %v", cmd, err)
	}
}

func tail(s []string, n int) []string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func strconvQuote(s string) string { return `"` + s + `"` }

const doneLine = `Done (1.0s)! For help, type "help"`

// startGameServer creates, attaches and starts a game server container and
// waits for its done line.
func startGameServer(t *testing.T, r *Runtime, spec runtime.ContainerSpec) *console {
	t.Helper()
	ctx := context.Background()
	if err := r.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	s, err := r.Attach(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	c := newConsole(t, s)
	if err := r.Start(ctx, spec.Name); err != nil {
		t.Fatal(err)
	}
	seen := c.expectLine(t, doneLine)
	if seen[0] != "Starting fake game server" {
		t.Errorf("first line = %q, want the first boot line (attach before start)", seen[0])
	}
	return c
}

// execOutput runs cmd in the container and returns its combined output.
func execOutput(t *testing.T, name string, cmd ...string) string {
	t.Helper()
	cli := rawClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := cli.ExecCreate(ctx, name, client.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	hr, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, hr.Reader); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
