// Package e2e drives the real wharf binary over HTTP, as the panel and a
// browser would, against the in-repo fake panel (internal/devpanel).
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

var wharfBinary string

func TestMain(m *testing.M) {
	// WHARF_E2E_BINARY runs a binary built beforehand (to profile it: the
	// one built here is removed at the end).
	if bin := os.Getenv("WHARF_E2E_BINARY"); bin != "" {
		wharfBinary = bin
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "wharf-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	wharfBinary = filepath.Join(dir, "wharf")
	// One binary for every test, built with the test tag: it runs on Docker
	// (the production path) unless a test's configuration asks for the
	// in-memory runtime (nodeOptions.fake). Without cgo, as the release is
	// built: the packaging test builds the same way, so the two builds share
	// their compiled packages in the build cache.
	build := exec.Command("go", "build", "-tags", "wharf_testruntime", "-o", wharfBinary, "github.com/wharf/wharf/cmd/wharf")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building wharf:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// node is one running wharf daemon with its fake panel.
type node struct {
	t       testing.TB
	URL     string
	Token   string
	Config  *config.Config
	CfgPath string
	Panel   *devpanel.Panel
	cmd     *exec.Cmd
	log     *syncBuffer
	exited  chan struct{}
	exitErr error
	bin     string // the binary to run; wharfBinary when empty
	// wrap, when set, runs the daemon under a command (its arguments
	// before the binary's), e.g. setpriv to drop a capability.
	wrap []string
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type nodeOptions struct {
	mutate  func(c *config.Config)
	servers []devpanel.Server
	// fake runs the node on the in-memory runtime (runtime/runtimetest),
	// for tests that never start a container: they need no Docker engine.
	// Otherwise the node needs one, and the test is skipped without it.
	fake bool
	// wrap runs the daemon under a command (its arguments before the
	// binary's), as node.wrap.
	wrap []string
}

// handedOut holds the ports freePort returned: a port is free again once
// its probe closes, so without it two parallel tests could get the same one.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

func freePort(t testing.TB) int {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		handedOut.Lock()
		taken := handedOut.ports[port]
		handedOut.ports[port] = true
		handedOut.Unlock()
		if !taken {
			return port
		}
	}
}

// startNode writes a config, starts the fake panel and the daemon, and waits
// until the API answers. The daemon is stopped with SIGTERM at cleanup and
// must exit 0.
func startNode(t testing.TB, opts nodeOptions) *node {
	t.Helper()
	dir := t.TempDir()
	const tokenID, token = "e2etokenid", "e2e-node-token-7f3c9a1b5d"
	panel := devpanel.New(tokenID, token)
	for _, s := range opts.servers {
		panel.PutServer(s)
	}
	panelSrv := httptest.NewServer(panel.Handler())
	t.Cleanup(panelSrv.Close)

	c := config.Defaults()
	c.UUID = "6f1a2b3c-4d5e-4f60-8a71-92b3c4d5e6f7"
	c.TokenID, c.Token = tokenID, token
	c.Remote = panelSrv.URL
	c.API.Host = "127.0.0.1"
	c.API.Port = freePort(t)
	c.PlaceUnder(dir)
	c.System.Username = "root"
	// Every node has an SFTP listener: on loopback, on its own port.
	c.System.SFTP.BindAddress = "127.0.0.1"
	c.System.SFTP.BindPort = freePort(t)
	if opts.fake {
		c.Testing.Runtime = config.TestRuntimeFake
	} else {
		testimages.RequireDocker(t)
		if testimages.Podman() {
			usePodman(c)
		}
	}
	if opts.mutate != nil {
		opts.mutate(c)
	}
	cfgPath := filepath.Join(dir, "config.yml")
	n := &node{
		t: t, Token: token, Config: c, CfgPath: cfgPath, Panel: panel, log: &syncBuffer{},
		wrap: opts.wrap,
	}
	// WHARF_BENCH_AGENT=wings: Pterodactyl Wings in place of Wharf
	// (wingsbench_test.go).
	if bin := wingsBenchBinary(t); bin != "" {
		n.bin = bin
		ids := make([]string, len(opts.servers))
		for i, s := range opts.servers {
			ids[i] = s.UUID
		}
		n.bootWings(dir, ids)
		return n
	}
	t.Cleanup(n.stop)
	// The ports were free when picked but are not held until the daemon
	// binds them: a parallel test's connection can take one in between.
	// Such a boot fails on bind and is retried on new ports.
	for attempt := 1; ; attempt++ {
		n.URL = fmt.Sprintf("http://127.0.0.1:%d", c.API.Port)
		if err := c.Save(cfgPath); err != nil {
			t.Fatal(err)
		}
		if n.boot() || attempt == 3 || !strings.Contains(n.log.String(), "address already in use") {
			break
		}
		c.API.Port, c.System.SFTP.BindPort = freePort(t), freePort(t)
		n.log = &syncBuffer{}
	}
	if n.bootFailed() {
		t.Fatalf("wharf exited during boot: %v\n%s", n.exitErr, n.log)
	}
	return n
}

// boot starts the daemon on CfgPath and waits until it answers or exits;
// it reports whether it answers.
func (n *node) boot() bool {
	n.t.Helper()
	n.exited = make(chan struct{})
	n.exitErr = nil
	bin := wharfBinary
	if n.bin != "" {
		bin = n.bin
	}
	args := append(append([]string(nil), n.wrap...), bin, "--config", n.CfgPath)
	n.cmd = exec.Command(args[0], args[1:]...)
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	// A test binary that dies (go test's -timeout panics, a kill) takes its
	// daemons with it: on a busy machine a leftover daemon (and its
	// containers' work) would load the next runs.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	cmd, exited := n.cmd, n.exited
	go func() { n.exitErr = cmd.Wait(); close(exited) }()
	n.waitReady()
	return !n.bootFailed()
}

func (n *node) bootFailed() bool {
	select {
	case <-n.exited:
		return true
	default:
		return false
	}
}

// waitReady waits until the API answers or the daemon exits.
func (n *node) waitReady() {
	n.t.Helper()
	wait.For(n.t, 30*time.Second, func() bool {
		if n.bootFailed() {
			return true
		}
		res, err := http.Get(n.URL + "/api/system")
		if err == nil {
			res.Body.Close()
		}
		return err == nil
	}, "wharf to answer\n%s", n.log)
}

func (n *node) stop() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	select {
	case <-n.exited:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
		if n.exitErr != nil {
			n.t.Errorf("wharf did not exit cleanly on SIGTERM: %v\n%s", n.exitErr, n.log)
		}
	case <-time.After(40 * time.Second):
		_ = n.cmd.Process.Kill()
		n.t.Errorf("wharf did not stop within 40s of SIGTERM\n%s", n.log)
	}
}

// request sends a request with the node token unless auth overrides it ("-" = none).
func (n *node) request(method, path string, body any, auth string) (*http.Response, []byte) {
	n.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			n.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	// Bounded by progress, not by a total: on a loaded machine a large
	// answer takes as long as it takes while bytes move; nothing moving
	// for requestStall (no answer, or a body that stops) fails the test.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stall := time.AfterFunc(requestStall, cancel)
	defer stall.Stop()
	moved := func() { stall.Reset(requestStall) }
	req, err := http.NewRequestWithContext(ctx, method, n.URL+path, rd)
	if err != nil {
		n.t.Fatal(err)
	}
	switch auth {
	case "":
		req.Header.Set("Authorization", "Bearer "+n.Token)
	case "-":
	default:
		req.Header.Set("Authorization", auth)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(progressReader{res.Body, moved})
	if err != nil {
		n.t.Fatalf("%s %s: reading the answer: %v (nothing moved for %s)", method, path, err, requestStall)
	}
	return res, data
}

// requestStall is how long a request may make no progress (n.request):
// 30 s, or WHARF_E2E_REQUEST_TIMEOUT (a Go duration) for a benchmark whose
// answer comes only at the end of a long job (a reference's decompress of a
// large tree under load).
var requestStall = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("WHARF_E2E_REQUEST_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return 30 * time.Second
}()

// progressReader calls moved whenever a read returns bytes.
type progressReader struct {
	r     io.Reader
	moved func()
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.moved()
	}
	return n, err
}

// kill9 kills the daemon without letting it clean up.
func (n *node) kill9() {
	n.t.Helper()
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
}

// restart starts the daemon again on the same configuration and data.
func (n *node) restart() {
	n.t.Helper()
	if !n.boot() {
		n.t.Fatalf("wharf exited during boot: %v\n%s", n.exitErr, n.log)
	}
}

// dockerSlots bounds the Docker tests that run in parallel: each starts
// containers on the one shared engine, next to the container-free tests.
var dockerSlots = make(chan struct{}, 2)

// parallelDocker marks a Docker test parallel. Only for a test whose
// servers have fresh UUIDs (newGameServer), that asserts no timing and that
// touches nothing of the engine but its own containers.
func parallelDocker(t *testing.T) {
	t.Helper()
	t.Parallel()
	dockerSlots <- struct{}{}
	t.Cleanup(func() { <-dockerSlots })
}

// usePodman points a node at the Podman of WHARF_TEST_ENGINE=podman
// through docker.host (not the environment, as an operator would) and
// gives it the test network of Podman (testimages.TestPodmanNetwork()), so
// that it never takes Docker's bridge on a host that runs both.
func usePodman(c *config.Config) {
	c.Docker.Host = os.Getenv("DOCKER_HOST")
	nw := testimages.TestPodmanNetwork()
	n := &c.Docker.Network
	n.Name, n.Mode, n.BridgeName = nw.Name, nw.Name, nw.Bridge
	n.Interface = nw.Gate4
	n.Interfaces.V4 = config.Subnet{Subnet: nw.V4, Gateway: nw.Gate4}
	n.Interfaces.V6 = config.Subnet{Subnet: nw.V6, Gateway: nw.Gate6}
}
