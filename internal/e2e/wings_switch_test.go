package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// wingsNode is a node in the state Wings leaves it when it is stopped: its
// configuration file with Wings' keys (testdata of internal/config), its
// directory layout, a running server container that Wings created (named
// by the server's UUID, Wings' labels, no NodeUUID), a local backup Wings
// made, its SFTP host key and its states file.
type wingsNode struct {
	root, cfgPath, network string
	server                 devpanel.Server
	backupID               string
	hostKey                []byte
	containerID            string
	startedAt              string
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func buildWingsNode(t *testing.T, panelURL string, port int) *wingsNode {
	t.Helper()
	ctx := context.Background()
	cli := testimages.Client(t)
	img := testimages.GameServer(ctx, t)
	w := &wingsNode{root: t.TempDir(), server: newGameServer(t), backupID: newBackupID()}
	w.network = "wharf-e2e-wings-" + randomHex(4)
	lib := filepath.Join(w.root, "var/lib/pterodactyl")

	// The configuration file as Wings rewrote it, with this test's paths.
	src, err := os.ReadFile("../config/testdata/wings-config.yml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer(
		"/var/lib/pterodactyl", lib,
		"/var/log/pterodactyl", filepath.Join(w.root, "var/log/pterodactyl"),
		"/tmp/pterodactyl", filepath.Join(w.root, "tmp/pterodactyl"),
		"https://panel.example.com", panelURL,
		"token_id: Xk2pL9qRz8YtNw4B", "token_id: e2etokenid",
		"token: 9aQ3sF7dK1mZ8xV2cB6nL0pR4tY7uI9oE3wQ5hJ8gT1kD6fS2aZ4xC7vB0nM3qW5", "token: e2e-node-token-7f3c9a1b5d",
		"host: 0.0.0.0\n  port: 8080", fmt.Sprintf("host: 127.0.0.1\n  port: %d", port),
		"bind_port: 2022", fmt.Sprintf("bind_port: %d", freePort(t)),
		"username: pterodactyl", "username: root",
		"pterodactyl_nw", w.network,
	).Replace(string(src))
	w.cfgPath = filepath.Join(w.root, "etc/pterodactyl/config.yml")
	for _, d := range []string{filepath.Dir(w.cfgPath), filepath.Join(lib, "volumes", w.server.UUID), filepath.Join(lib, "backups"), filepath.Join(lib, "volumes/.sftp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(w.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	// Wings' SFTP host key and states file.
	w.hostKey = []byte("-----BEGIN PRIVATE KEY-----\n" + randomHex(32) + "\n-----END PRIVATE KEY-----\n")
	if err := os.WriteFile(filepath.Join(lib, "volumes/.sftp/id_ed25519"), w.hostKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "states.json"), []byte(`{"`+w.server.UUID+`":"running"}`), 0o644); err != nil {
		t.Fatal(err)
	}

	// The server's files, and a backup as Wings makes one: Go's tar
	// writer, regular files only (no directory entries), gzip.
	dataDir := filepath.Join(lib, "volumes", w.server.UUID)
	writeFiles(t, dataDir, map[string]string{"server.properties": "motd=from wings\n", "world/level.dat": "level-now"})
	backupFiles := map[string]string{"server.properties": "motd=backed up by wings\n", "world/level.dat": "level-then", "world/region/r.0.mca": strings.Repeat("chunk", 1000)}
	f, err := os.OpenFile(filepath.Join(lib, "backups", w.backupID+".tar.gz"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	mtime := time.Date(2024, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, name := range []string{"server.properties", "world/level.dat", "world/region/r.0.mca"} {
		body := backupFiles[name]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: mtime}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	// Wings' network and running container.
	if _, err := cli.NetworkCreate(ctx, w.network, client.NetworkCreateOptions{Driver: "bridge"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Runs before newGameServer's cleanup: the container goes first.
		_, _ = cli.ContainerRemove(context.Background(), w.server.UUID, containerRemoveForce)
		if _, err := cli.NetworkRemove(context.Background(), w.network, client.NetworkRemoveOptions{}); err != nil {
			t.Errorf("removing network %s: %v", w.network, err)
		}
	})
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: w.server.UUID, Config: &container.Config{
		Hostname: w.server.UUID, AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Tty: true, OpenStdin: true, Image: img,
		Env:    []string{"STARTUP=gameserver", "SERVER_MEMORY=128", "TZ=UTC"},
		Labels: map[string]string{"Service": "Pterodactyl", "ContainerType": "server_process"},
	}, HostConfig: &container.HostConfig{
		Mounts:      []mount.Mount{{Type: mount.TypeBind, Source: dataDir, Target: "/home/container"}},
		NetworkMode: container.NetworkMode(w.network),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err := engineInspect(ctx, cli, created.ID)
	if err != nil || !info.State.Running {
		t.Fatalf("the Wings container does not run: %v", err)
	}
	w.containerID, w.startedAt = info.ID, info.State.StartedAt
	return w
}

// TestSwitchFromWings stops "Wings" (it is not running: the node is left as
// Wings leaves it) and starts Wharf with --config on Wings' configuration
// file: the running container is re-attached, not restarted; console,
// commands, stats and power work; Wings' backup restores; Wings' host key
// and settings stay; and a backup Wharf makes afterwards is one Wings'
// restore reads as plain files (the way back).
func TestSwitchFromWings(t *testing.T) {
	testimages.RequireDocker(t)
	const tokenID, token = "e2etokenid", "e2e-node-token-7f3c9a1b5d"
	panel := devpanel.New(tokenID, token)
	panelSrv := httptest.NewServer(panel.Handler())
	t.Cleanup(panelSrv.Close)
	port := freePort(t)
	w := buildWingsNode(t, panelSrv.URL, port)
	panel.PutServer(w.server)
	s := w.server.UUID

	c, err := config.Load(w.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{
		t: t, URL: fmt.Sprintf("http://127.0.0.1:%d", port), Token: token, Config: c,
		CfgPath: w.cfgPath, Panel: panel, log: &syncBuffer{},
	}
	t.Cleanup(n.stop)
	n.restart()

	// Same container, not restarted, running.
	n.waitState(s, "running", 30*time.Second)
	cli := testimages.Client(t)
	info, err := engineInspect(context.Background(), cli, s)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != w.containerID || info.State.StartedAt != w.startedAt {
		t.Fatalf("the Wings container was re-created or restarted: %s@%s -> %s@%s", w.containerID, w.startedAt, info.ID, info.State.StartedAt)
	}
	if !strings.Contains(n.log.String(), "system.openat_mode") {
		t.Fatalf("Wings' unknown keys were not logged:\n%s", n.log)
	}
	// Wings' enable_icc: true is Wings' default, not the operator's: turned
	// off once and the file marked (issue 32, migrating-from-wings.md).
	if saved, err := config.Load(w.cfgPath); err != nil || saved.Docker.Network.EnableICC || !saved.Docker.Network.ICCDefaultApplied {
		t.Errorf("after the switch: %v, enable_icc %v, icc_default_applied %v", err, saved != nil && saved.Docker.Network.EnableICC, saved != nil && saved.Docker.Network.ICCDefaultApplied)
	}
	if !strings.Contains(n.log.String(), "docker.network.enable_icc was true") {
		t.Errorf("the reset of Wings' enable_icc was not logged:\n%s", n.log)
	}

	// Console (history from the container log, then live over the
	// websocket), commands and stats.
	n.waitLog(s, "Done (")
	waitNextSecond() // a token of the boot second is refused
	ws := n.mustDial(t, s)
	ws.auth(n.sign(t, wsClaims(s, "user-1", "*")))
	ws.send("send command", "echo hello-from-wharf")
	ws.expect("console output", 15*time.Second, func(a string) bool { return strings.Contains(a, "hello-from-wharf") })
	n.command(s, "echo via-http")
	n.waitLog(s, "via-http")
	var u map[string]any
	if !wait.Until(30*time.Second, func() bool {
		u = n.details(s)["utilization"].(map[string]any)
		return u["memory_bytes"].(float64) > 0 && u["uptime"].(float64) > 0
	}) {
		t.Fatalf("no stats for the re-attached container: %v", u)
	}

	// Power: stop, then restore Wings' backup, then start again.
	n.power(s, "stop")
	n.waitState(s, "offline", 60*time.Second)
	res, body := n.request("POST", "/api/servers/"+s+"/backup/"+w.backupID+"/restore", map[string]any{"adapter": "wings", "truncate_directory": true}, "")
	if res.StatusCode != 202 {
		t.Fatalf("restore of the Wings backup: %d %s", res.StatusCode, body)
	}
	if !n.waitRestoreStatus(w.backupID, 60*time.Second) {
		t.Fatalf("the Wings backup did not restore\n%s", n.log)
	}
	dataDir := filepath.Join(c.System.Data, s)
	for name, want := range map[string]string{"server.properties": "motd=backed up by wings\n", "world/level.dat": "level-then", "world/region/r.0.mca": strings.Repeat("chunk", 1000)} {
		got, err := os.ReadFile(filepath.Join(dataDir, name))
		if err != nil || string(got) != want {
			t.Fatalf("%s after restoring the Wings backup: %q %v", name, got, err)
		}
	}
	n.power(s, "start")
	n.waitState(s, "running", 60*time.Second)
	n.waitLog(s, "Done (")

	// The way back: a backup Wharf makes is plain files to Go's tar
	// reader (what Wings' restore uses), with no integrity file among them.
	if err := os.MkdirAll(filepath.Join(dataDir, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	id := newBackupID()
	res, body = n.request("POST", "/api/servers/"+s+"/backup", map[string]any{"adapter": "wings", "uuid": id}, "")
	if res.StatusCode != 202 {
		t.Fatalf("backup: %d %s", res.StatusCode, body)
	}
	if st := n.waitBackupStatus(id, 60*time.Second); !st.Successful {
		t.Fatalf("backup failed\n%s", n.log)
	}
	bf, err := os.Open(filepath.Join(c.System.BackupDirectory, id+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	gz, err := gzip.NewReader(bf)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg || h.Name == archive.ManifestName {
			t.Fatalf("Wings' restore would see %q (type %c)", h.Name, h.Typeflag)
		}
		files++
	}
	if files < 3 {
		t.Fatalf("only %d files in the backup", files)
	}

	// Wings' host key and its own settings are still there for the way back.
	if key, err := os.ReadFile(filepath.Join(c.System.Data, ".sftp/id_ed25519")); err != nil || string(key) != string(w.hostKey) {
		t.Fatalf("the SFTP host key changed: %v", err)
	}
	saved, err := os.ReadFile(w.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"openat_mode: auto", "enable_log_rotate: true", "use_performant_inspect: true", "app_name: Pterodactyl"} {
		if !strings.Contains(string(saved), key) {
			t.Fatalf("the configuration file lost %q:\n%s", key, saved)
		}
	}
	n.power(s, "kill")
	n.waitState(s, "offline", 60*time.Second)
}
