package e2e

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
)

// The job rules (docs/compatibility.md): install, reinstall, restore and the
// transfers exclude each other and backups; backups run side by side but
// never under an exclusive job. A refusal is a 409 naming the running job.

// What each running job is called in a refusal.
const (
	busyInstalling = "The server is being installed."
	busyRestoring  = "The server is being restored."
	busyBackingUp  = "The server is being backed up"
)

// startJob sends the request that starts job on server id: install,
// reinstall, restore (of the local backup backupID), transfer or backup (a
// new local one).
func (n *node) startJob(id, job, backupID string) (*http.Response, []byte) {
	n.t.Helper()
	base := "/api/servers/" + id
	switch job {
	case "install", "reinstall":
		return n.request("POST", base+"/"+job, nil, "")
	case "restore":
		return n.request("POST", base+"/backup/"+backupID+"/restore", map[string]any{"adapter": "local"}, "")
	case "transfer":
		// Never reached: every transfer here is refused before it connects.
		return n.request("POST", base+"/transfer", map[string]any{"url": "http://127.0.0.1:9/api/transfers", "token": "Bearer x"}, "")
	case "backup":
		return n.request("POST", base+"/backup", map[string]any{"adapter": "local", "uuid": newBackupID()}, "")
	}
	n.t.Fatalf("unknown job %q", job)
	return nil, nil
}

// assertBusy checks a refusal: 409 with a JSON error naming the running job.
func assertBusy(t *testing.T, job string, res *http.Response, body []byte, want string) {
	t.Helper()
	var e struct {
		Error     string `json:"error"`
		RequestID string `json:"request_id"`
	}
	if res.StatusCode != http.StatusConflict || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, want) || e.RequestID == "" {
		t.Fatalf("%s: %d %s, want 409 with %q", job, res.StatusCode, body, want)
	}
}

// localBackupOf makes a local backup of id and waits for it.
func (n *node) localBackupOf(id string) string {
	n.t.Helper()
	b := newBackupID()
	res, body := n.request("POST", "/api/servers/"+id+"/backup", map[string]any{"adapter": "local", "uuid": b}, "")
	if res.StatusCode != 202 {
		n.t.Fatalf("backup: %d %s", res.StatusCode, body)
	}
	if st := n.waitBackupStatus(b, 60*time.Second); !st.Successful {
		n.t.Fatalf("backup %s failed\n%s", b, n.log)
	}
	return b
}

// While an install runs, no other job starts: restore, reinstall,
// transfer and backup are refused with 409. Once it ends, a restore runs.
func TestJobsRefusedDuringInstall(t *testing.T) {
	parallelDocker(t)
	s := newGameServer(t)
	testimages.Busybox(context.Background(), t)
	s.InstallScript = &devpanel.InstallScript{ContainerImage: "~" + testimages.BusyboxTag, Entrypoint: "sh", Script: "sleep 6\n"}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	writeFiles(t, n.serverDir(s.UUID), map[string]string{"server.properties": "motd=jobs\n"})
	b := n.localBackupOf(s.UUID)

	if res, body := n.startJob(s.UUID, "install", ""); res.StatusCode != 202 {
		t.Fatalf("install: %d %s", res.StatusCode, body)
	}
	for _, job := range []string{"restore", "reinstall", "install", "transfer", "backup"} {
		res, body := n.startJob(s.UUID, job, b)
		assertBusy(t, job+" during an install", res, body, busyInstalling)
	}
	// The file manager's writes and its file jobs (compress, decompress,
	// pull) are refused too; reads are not.
	files := "/api/servers/" + s.UUID + "/files/"
	for _, c := range []struct {
		method, route string
		body          any
	}{
		{"POST", "write?file=new.txt", "x"},
		{"POST", "create-directory", map[string]string{"name": "d", "path": "/"}},
		{"POST", "compress", map[string]any{"root": "/", "files": []string{"server.properties"}}},
		{"POST", "decompress", map[string]any{"root": "/", "file": "server.properties"}},
		{"POST", "pull", map[string]any{"url": "http://127.0.0.1:9/x", "root": "/"}},
	} {
		res, body := n.request(c.method, files+c.route, c.body, "")
		assertBusy(t, c.route+" during an install", res, body, busyInstalling)
	}
	if res, body := n.request("GET", files+"contents?file=server.properties", nil, ""); res.StatusCode != 200 {
		t.Fatalf("a read during an install: %d %s", res.StatusCode, body)
	}
	if ok, _ := installStatus(t, n, s.UUID); !ok {
		t.Fatal("install failed")
	}
	if res, body := n.startJob(s.UUID, "restore", b); res.StatusCode != 202 {
		t.Fatalf("restore after the install: %d %s", res.StatusCode, body)
	}
	if !n.waitRestoreStatus(b, 60*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
}

// While a restore runs (10 MiB/s, 30 MiB), a transfer, a backup, an install
// and a second restore are refused; once it ends, a backup runs.
func TestJobsRefusedDuringRestore(t *testing.T) {
	parallelDocker(t)
	s := newGameServer(t)
	n := startNode(t, nodeOptions{
		servers: []devpanel.Server{s},
		mutate:  func(c *config.Config) { c.System.Backups.WriteLimit = 10; c.System.Backups.CompressionLevel = "none" },
	})
	big := make([]byte, 30<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(n.serverDir(s.UUID), "world.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	b := n.localBackupOf(s.UUID)

	if res, body := n.startJob(s.UUID, "restore", b); res.StatusCode != 202 {
		t.Fatalf("restore: %d %s", res.StatusCode, body)
	}
	for _, job := range []string{"transfer", "backup", "install", "reinstall", "restore"} {
		res, body := n.startJob(s.UUID, job, b)
		assertBusy(t, job+" during a restore", res, body, busyRestoring)
	}
	if d := n.details(s.UUID); d["is_suspended"] != true {
		t.Fatalf("not suspended during the restore: %v", d["is_suspended"])
	}
	if !n.waitRestoreStatus(b, 60*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
	if d := n.details(s.UUID); d["is_suspended"] != false {
		t.Fatalf("still suspended after the restore: %v", d["is_suspended"])
	}
	n.localBackupOf(s.UUID)
}

// While a backup runs (its upload held by the object store), a restore, an
// install, a reinstall and a transfer are refused at once (they do not wait
// for it); another backup runs beside it. Once it ends, a restore runs.
func TestJobsExclusiveRefusedDuringBackup(t *testing.T) {
	s := newGameServer(t)
	uploading := make(chan struct{}, 16)
	release := make(chan struct{})
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uploading <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("ETag", `"e2e"`)
	}))
	t.Cleanup(store.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	n.Panel.SetBackupUploadURLs(func(string, int64) ([]string, int64, error) {
		return []string{store.URL + "/part1"}, 5 << 30, nil
	})
	writeFiles(t, n.serverDir(s.UUID), map[string]string{"server.properties": "motd=jobs\n"})
	local := n.localBackupOf(s.UUID)

	remote := newBackupID()
	if res, body := n.request("POST", "/api/servers/"+s.UUID+"/backup", map[string]any{"adapter": "object_store", "uuid": remote}, ""); res.StatusCode != 202 {
		t.Fatalf("object_store backup: %d %s", res.StatusCode, body)
	}
	select {
	case <-uploading:
	case <-time.After(60 * time.Second):
		t.Fatalf("the backup never uploaded\n%s", n.log)
	}
	for _, job := range []string{"restore", "install", "reinstall", "transfer"} {
		start := time.Now()
		res, body := n.startJob(s.UUID, job, local)
		assertBusy(t, job+" during a backup", res, body, busyBackingUp)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%s waited %s before the refusal", job, d)
		}
	}
	n.localBackupOf(s.UUID) // shared: runs beside the held one
	close(release)
	if st := n.waitBackupStatus(remote, 60*time.Second); !st.Successful {
		t.Fatalf("object_store backup failed\n%s", n.log)
	}
	if res, body := n.startJob(s.UUID, "restore", local); res.StatusCode != 202 {
		t.Fatalf("restore after the backup: %d %s", res.StatusCode, body)
	}
	if !n.waitRestoreStatus(local, 60*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
}
