package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// Issue 22: the endpoints Pelican's panel calls, ws/deny for Pterodactyl
// panels up to 1.11, and remote_query.custom_headers, on the real binary.

func getJSON(t *testing.T, n *node, path string, out any) {
	t.Helper()
	res, body := n.request("GET", path, nil, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, body)
	}
}

// memTotalBytes is MemTotal of the host's /proc/meminfo.
func memTotalBytes(t *testing.T) uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.Fields(v)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal")
	return 0
}

// TestPelicanNodeEndpoints: GET /api/system/utilization, /api/system/ips,
// /api/diagnostics, /api/system?v=2 and /api/servers/{s}/install-logs answer
// with the shapes Pelican Wings answers (pelican-dev/wings
// router/router_system.go, router/router_server.go getServerInstallLogs;
// read by pelican-dev/panel app/Models/Node.php, EditNode.php,
// EditServer.php) and the host's own figures.
func TestPelicanNodeEndpoints(t *testing.T) {
	s := newGameServer(t)
	testimages.Busybox(context.Background(), t)
	s.InstallScript = &devpanel.InstallScript{
		ContainerImage: "~" + testimages.BusyboxTag, Entrypoint: "sh",
		Script: "echo installing $MAX_PLAYERS\r\necho finished\r\n",
	}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})

	var u struct {
		MemoryTotal   *uint64  `json:"memory_total"`
		MemoryUsed    *uint64  `json:"memory_used"`
		SwapTotal     *uint64  `json:"swap_total"`
		SwapUsed      *uint64  `json:"swap_used"`
		DiskTotal     *uint64  `json:"disk_total"`
		DiskUsed      *uint64  `json:"disk_used"`
		LoadAverage1  *float64 `json:"load_average1"`
		LoadAverage5  *float64 `json:"load_average5"`
		LoadAverage15 *float64 `json:"load_average15"`
		CPUPercent    *float64 `json:"cpu_percent"`
		DiskDetails   []struct {
			Mountpoint string   `json:"mountpoint"`
			Tags       []string `json:"tags"`
		} `json:"disk_details"`
	}
	getJSON(t, n, "/api/system/utilization", &u)
	data, _ := json.Marshal(u)
	if u.MemoryTotal == nil || u.MemoryUsed == nil || u.SwapTotal == nil || u.SwapUsed == nil || u.DiskTotal == nil || u.DiskUsed == nil {
		t.Fatalf("utilization lacks a field: %s", data)
	}
	if *u.MemoryTotal != memTotalBytes(t) || *u.MemoryUsed == 0 || *u.MemoryUsed > *u.MemoryTotal || *u.SwapUsed > *u.SwapTotal {
		t.Errorf("utilization memory: %s", data)
	}
	if u.LoadAverage1 == nil || u.LoadAverage5 == nil || u.LoadAverage15 == nil || u.CPUPercent == nil || *u.CPUPercent < 0 || *u.CPUPercent > 100 {
		t.Errorf("utilization load/cpu: %s", data)
	}
	if *u.DiskTotal == 0 || *u.DiskUsed > *u.DiskTotal || len(u.DiskDetails) == 0 || !slices.Contains(u.DiskDetails[0].Tags, "Root") {
		t.Errorf("utilization disk: %s", data)
	}

	var ips struct {
		IPAddresses []string `json:"ip_addresses"`
	}
	getJSON(t, n, "/api/system/ips", &ips)
	host := map[string]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		host[a.(*net.IPNet).IP.String()] = true
	}
	for _, ip := range ips.IPAddresses {
		p := net.ParseIP(ip)
		if !host[ip] || p.IsLoopback() || p.IsLinkLocalUnicast() {
			t.Errorf("ips lists %q (host addresses %v)", ip, addrs)
		}
	}

	var v2 struct {
		Version string `json:"version"`
		Docker  struct {
			Version    string `json:"version"`
			Containers struct {
				Total int `json:"total"`
			} `json:"containers"`
		} `json:"docker"`
		System struct {
			CPUThreads  int    `json:"cpu_threads"`
			MemoryBytes int64  `json:"memory_bytes"`
			OSType      string `json:"os_type"`
			OS          string `json:"os"`
		} `json:"system"`
	}
	getJSON(t, n, "/api/system?v=2", &v2)
	sv, err := testimages.Client(t).ServerVersion(context.Background(), client.ServerVersionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v2.Docker.Version != sv.Version || v2.System.CPUThreads != runtime.NumCPU() || v2.System.MemoryBytes <= 0 ||
		v2.System.OSType != "linux" || v2.System.OS == "" || v2.Version == "" {
		t.Errorf("system v2: %+v (engine %s)", v2, sv.Version)
	}

	res, body := n.request("GET", "/api/diagnostics?include_logs=true&log_lines=20", nil, "")
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") ||
		!strings.Contains(string(body), "Wharf diagnostics") || !strings.Contains(string(body), sv.Version) {
		t.Errorf("diagnostics: %d %s\n%s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	if strings.Contains(string(body), n.Token) {
		t.Errorf("diagnostics print the node token:\n%s", body)
	}

	// The install log: none yet (404), then the script's output only.
	logs := "/api/servers/" + s.UUID + "/install-logs"
	if res, body := n.request("GET", logs, nil, ""); res.StatusCode != 404 || !strings.Contains(string(body), `"error"`) {
		t.Errorf("install-logs before any install: %d %s", res.StatusCode, body)
	}
	if res, body := n.request("POST", "/api/servers/"+s.UUID+"/install", nil, ""); res.StatusCode != 202 {
		t.Fatalf("install: %d %s", res.StatusCode, body)
	}
	if ok, _ := installStatus(t, n, s.UUID); !ok {
		t.Fatalf("install failed\n%s", n.log)
	}
	var il struct {
		Data *string `json:"data"`
	}
	getJSON(t, n, logs, &il)
	if il.Data == nil || !strings.Contains(*il.Data, "installing 20") || !strings.Contains(*il.Data, "finished") ||
		strings.Contains(*il.Data, "Environment variables") {
		t.Errorf("install-logs data: %v", il.Data)
	}
}

// TestPruneRemovesOnlyUnusedDanglingImages: DELETE
// /api/system/docker/image/prune removes a dangling image nobody uses and
// keeps a dangling image a server's container runs on; it answers Docker's
// prune report, as Pelican Wings (system.PruneDockerImages) and its panel's
// PruneImagesCommand reads it. The test owns both images and asserts only
// about them (the engine is shared), and holds the machine's prune lock:
// another suite's prune would remove its unused image first.
func TestPruneRemovesOnlyUnusedDanglingImages(t *testing.T) {
	engineWide(t, "prune")
	s := newGameServer(t)
	cli := testimages.Client(t)
	ctx := context.Background()
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	unusedTag, inUseTag := "wharf-e2e-prune-"+id+":unused", "wharf-e2e-prune-"+id+":inuse"

	src, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: testimages.GameServerTag}, Name: "wharf-e2e-prune-src-" + id})
	if err != nil {
		t.Fatal(err)
	}
	var made []string
	t.Cleanup(func() {
		_, _ = cli.ContainerRemove(ctx, src.ID, containerRemoveForce)
		for _, img := range made {
			_, _ = cli.ImageRemove(ctx, img, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		}
	})
	commit := func(tag, label string) string {
		t.Helper()
		r, err := cli.ContainerCommit(ctx, src.ID, client.ContainerCommitOptions{Reference: tag, Changes: []string{"LABEL wharf.e2e.prune=" + label}})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, r.ID)
		return r.ID
	}
	unused := commit(unusedTag, id+"-unused-1")
	commit(unusedTag, id+"-unused-2") // the first loses its tag: dangling, no container
	inUse := commit(inUseTag, id+"-inuse-1")

	s.Settings["container"] = map[string]any{"image": "~" + inUseTag}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	n.power(s.UUID, "start")
	n.waitState(s.UUID, "running", 60*time.Second)
	commit(inUseTag, id+"-inuse-2") // the server's image loses its tag: dangling, in use

	for name, img := range map[string]string{"unused": unused, "in use": inUse} {
		info, err := cli.ImageInspect(ctx, img)
		if err != nil || len(info.RepoTags) != 0 {
			t.Fatalf("control: the %s image is not dangling before the prune: %v %v", name, info.RepoTags, err)
		}
	}

	res, body := n.request("DELETE", "/api/system/docker/image/prune", nil, "")
	if res.StatusCode != 200 {
		t.Fatalf("prune: %d %s", res.StatusCode, body)
	}
	var rep struct {
		ImagesDeleted  []struct{ Untagged, Deleted string }
		SpaceReclaimed *uint64
	}
	if err := json.Unmarshal(body, &rep); err != nil || rep.SpaceReclaimed == nil {
		t.Fatalf("prune answer %s: %v", body, err)
	}
	var reported bool
	for _, d := range rep.ImagesDeleted {
		reported = reported || d.Deleted == unused
		if d.Deleted == inUse {
			t.Errorf("the prune reports the in-use image deleted: %s", body)
		}
	}
	if !reported {
		t.Errorf("the prune does not report the unused dangling image %s: %s", unused, body)
	}
	if _, err := cli.ImageInspect(ctx, unused); err == nil {
		t.Errorf("the unused dangling image is still there")
	}
	if _, err := cli.ImageInspect(ctx, inUse); err != nil {
		t.Errorf("the in-use image was removed: %v", err)
	}
	if st := n.details(s.UUID)["state"]; st != "running" {
		t.Errorf("server state after the prune: %v", st)
	}
}

// TestWSDenyByJTI: POST /api/servers/{s}/ws/deny {"jtis": [X]}, as
// Pterodactyl panels up to 1.11 send it when a subuser is removed
// (pterodactyl/panel app/Repositories/Wings/DaemonServerRepository.php
// revokeJTIs), with Wings' semantics (pterodactyl/wings
// router/tokens/websocket.go DenyJTI, Denylisted): the open socket of X is
// closed, a new socket with the old token is refused, another jti works,
// and a token with jti X issued after the denial works again.
func TestWSDenyByJTI(t *testing.T) {
	s := newGameServer(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	const (
		removed = "00000000-0000-4000-8000-0000000000b1"
		other   = "00000000-0000-4000-8000-0000000000b2"
	)
	jtiOf := func(user string) string { return "md5-of-" + user } // the panel's md5(user id . server uuid)
	mint := func(user string) string {
		c := wsClaims(s.UUID, user, "*")
		c["jti"] = jtiOf(user)
		return n.sign(t, c)
	}
	waitNextSecond() // a token of the daemon's boot second is refused
	oldToken := mint(removed)
	sub := n.mustDial(t, s.UUID)
	sub.auth(oldToken)
	keep := n.mustDial(t, s.UUID)
	keep.auth(mint(other))

	res, body := n.request("POST", "/api/servers/"+s.UUID+"/ws/deny", map[string]any{"jtis": []string{jtiOf(removed)}}, "")
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("ws/deny: %d %s", res.StatusCode, body)
	}
	denied := time.Now()
	if code := sub.closed(10 * time.Second); code != 4401 {
		t.Errorf("the denied socket closed with %d, want 4401", code)
	}

	again := n.mustDial(t, s.UUID)
	again.send("auth", oldToken)
	m := again.expect2("auth success", "jwt error", 10*time.Second)
	if m.Event != "jwt error" || !strings.HasPrefix(strings.Join(m.Args, ""), "jwt: created too far in past (denylist)") {
		t.Errorf("the denied token on a new socket: %+v", m)
	}
	again.send("send command", "say still here")
	again.expect("jwt error", 10*time.Second, nil)

	keep.send("send stats")
	keep.expect("stats", 10*time.Second, nil)
	if !keep.isOpen() {
		t.Error("the socket of another jti was closed")
	}

	// A token with the same jti issued after the denial (a later second) works.
	for time.Now().Unix() <= denied.Unix() {
		waitNextSecond()
	}
	fresh := n.mustDial(t, s.UUID)
	fresh.auth(mint(removed))

	n.assertAnswersEveryFace(t, s.UUID)
}

// TestCustomHeadersReachThePanel: remote_query.custom_headers (Pelican
// Wings' config/config.go RemoteQuery.CustomHeaders) go with every call the
// daemon makes to the panel, and never into its log.
func TestCustomHeadersReachThePanel(t *testing.T) {
	t.Parallel()
	const secret = "cf-secret-5b1d9e0c7a"
	n := startNode(t, nodeOptions{fake: true, mutate: func(c *config.Config) {
		c.RemoteQuery.CustomHeaders = map[string]string{"CF-Access-Client-Id": "node.access", "CF-Access-Client-Secret": secret}
		c.Debug = true
	}})
	if _, ok := n.Panel.WaitForCall("GET", "/servers", 30*time.Second); !ok {
		t.Fatalf("the daemon never called the panel\n%s", n.log)
	}
	calls := n.Panel.Calls()
	if len(calls) == 0 {
		t.Fatal("no call recorded")
	}
	for _, c := range calls {
		if c.Header.Get("CF-Access-Client-Id") != "node.access" || c.Header.Get("CF-Access-Client-Secret") != secret {
			t.Errorf("%s %s without the custom headers: %v", c.Method, c.Path, c.Header)
		}
		if c.Header.Get("Authorization") != "Bearer "+n.Config.TokenID+"."+n.Token {
			t.Errorf("%s %s: the custom headers changed Authorization", c.Method, c.Path)
		}
	}
	n.stop()
	if strings.Contains(n.log.String(), secret) {
		t.Errorf("the daemon logged the custom header's value:\n%s", n.log)
	}
}

// TestWSDenyPanelConsoleRecovers: a Pterodactyl 1.11 panel calls ws/deny
// also when a subuser's permissions change. Its console (sockette)
// reconnects after the 4401 close, its stored token is refused with the
// denylist text, it fetches a new token (now with the new permissions) and
// is connected again without a page refresh.
func TestWSDenyPanelConsoleRecovers(t *testing.T) {
	s := newGameServer(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	const user, jti = "00000000-0000-4000-8000-0000000000c1", "md5-of-c1"
	mint := func() string {
		c := wsClaims(s.UUID, user, "*")
		c["jti"] = jti
		return n.sign(t, c)
	}
	waitNextSecond()
	p := n.openPanelConsole(t, s.UUID, mint(), mint)
	p.waitAuthed(10 * time.Second)

	if res, body := n.request("POST", "/api/servers/"+s.UUID+"/ws/deny", map[string]any{"jtis": []string{jti}}, ""); res.StatusCode != http.StatusNoContent {
		t.Fatalf("ws/deny: %d %s", res.StatusCode, body)
	}
	stopped := false
	wait.For(t, 20*time.Second, func() bool {
		authed, final, opens := p.state()
		stopped = final != 0
		return stopped || (authed && opens >= 2)
	}, "the console to reconnect with a new token: %s", p)
	if stopped {
		t.Fatalf("the console stopped reconnecting: %s", p)
	}
	if !strings.Contains(p.String(), "4401") {
		t.Errorf("the first socket did not close with 4401: %s", p)
	}
}

// TestPelicanEndpointsRequireTheNodeToken: the new node endpoints refuse a
// missing (401) or wrong (403) node token, and do nothing then.
func TestPelicanEndpointsRequireTheNodeToken(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{exampleServer(knownServer)}})
	s := "/api/servers/" + knownServer
	for _, ep := range []struct{ method, path string }{
		{"GET", "/api/system/utilization"}, {"GET", "/api/system/ips"}, {"GET", "/api/diagnostics"},
		{"DELETE", "/api/system/docker/image/prune"}, {"GET", s + "/install-logs"}, {"POST", s + "/ws/deny"},
		{"GET", "/api/system?v=2"},
	} {
		for auth, want := range map[string]int{"-": 401, "Bearer wrong-token": 403} {
			res, body := n.request(ep.method, ep.path, `{"jtis":["x"]}`, auth)
			if res.StatusCode != want || !strings.Contains(string(body), `"error"`) {
				t.Errorf("%s %s with %q: %d %s, want %d", ep.method, ep.path, auth, res.StatusCode, body, want)
			}
		}
	}
	if strings.Contains(n.log.String(), "pruned dangling images") || strings.Contains(n.log.String(), "token ids denied") {
		t.Errorf("a refused request acted:\n%s", n.log)
	}
}
