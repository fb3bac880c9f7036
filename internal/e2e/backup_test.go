package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/tree"
	"github.com/wharf/wharf/internal/testutil/wait"
)

var backupServer = processID("7c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f")

type backupStatus struct {
	Checksum     string            `json:"checksum"`
	ChecksumType string            `json:"checksum_type"`
	Size         int64             `json:"size"`
	Successful   bool              `json:"successful"`
	Parts        []json.RawMessage `json:"parts"`
}

func newBackupID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (n *node) serverDir(uuid string) string { return filepath.Join(n.Config.System.Data, uuid) }

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// waitBackupStatus waits for the backup status report to the panel.
func (n *node) waitBackupStatus(id string, timeout time.Duration) backupStatus {
	n.t.Helper()
	c, ok := n.Panel.WaitForCall("POST", "/backups/"+id, timeout)
	if !ok {
		n.t.Fatalf("no backup status for %s within %s\n%s", id, timeout, n.log)
	}
	var st backupStatus
	if err := json.Unmarshal(c.Body, &st); err != nil {
		n.t.Fatal(err)
	}
	return st
}

func (n *node) waitRestoreStatus(id string, timeout time.Duration) bool {
	n.t.Helper()
	c, ok := n.Panel.WaitForCall("POST", "/backups/"+id+"/restore", timeout)
	if !ok {
		n.t.Fatalf("no restore status for %s within %s\n%s", id, timeout, n.log)
	}
	var st struct{ Successful bool }
	if err := json.Unmarshal(c.Body, &st); err != nil {
		n.t.Fatal(err)
	}
	return st.Successful
}

func archiveNames(t *testing.T, path string) map[string]*tar.Header {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return tree.Headers(t, f)
}

func (n *node) backup(id, adapter, ignore string) backupStatus {
	n.t.Helper()
	res, body := n.request("POST", "/api/servers/"+backupServer+"/backup", map[string]any{"adapter": adapter, "uuid": id, "ignore": ignore}, "")
	if res.StatusCode != 202 || len(body) != 0 {
		n.t.Fatalf("backup: %d %s", res.StatusCode, body)
	}
	return n.waitBackupStatus(id, 60*time.Second)
}

func TestBackupLocalCreateIgnoreAndDelete(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{gameServer(backupServer)}})
	dir := n.serverDir(backupServer)
	writeFiles(t, dir, map[string]string{
		"server.properties": "motd=hi\n", "world/level.dat": strings.Repeat("lvl", 10000),
		"logs/latest.log": "log\n", "cache/x.bin": "cache", "plugins/a.jar": "jar",
	})
	if err := os.Symlink("/etc", filepath.Join(dir, "etc-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}

	// Bad requests start nothing.
	for _, bad := range []any{`{"adapter":`, map[string]any{"adapter": "local", "uuid": "../../etc/x"}, map[string]any{"adapter": "ftp", "uuid": newBackupID()}, map[string]any{"adapter": "local"}} {
		res, body := n.request("POST", "/api/servers/"+backupServer+"/backup", bad, "")
		if res.StatusCode != 400 && res.StatusCode != 422 || !strings.Contains(string(body), `"error"`) {
			t.Fatalf("bad backup request %v: %d %s", bad, res.StatusCode, body)
		}
	}

	// Ignore from the body.
	id := newBackupID()
	st := n.backup(id, "local", "logs/\n*.jar")
	path := filepath.Join(n.Config.System.BackupDirectory, id+".tar.gz")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(data)
	if !st.Successful || st.Checksum != hex.EncodeToString(sum[:]) || st.ChecksumType != "sha1" || st.Size != int64(len(data)) || st.Parts == nil || len(st.Parts) != 0 {
		t.Fatalf("status %+v does not describe the archive (%d bytes)", st, len(data))
	}
	names := archiveNames(t, path)
	if h := names["etc-link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/etc" {
		t.Fatalf("the /etc link was not archived as a link: %+v", h)
	}
	for name := range names {
		if strings.HasPrefix(name, "logs") || strings.HasSuffix(name, ".jar") || strings.Contains(name, "passwd") {
			t.Fatalf("unexpected entry %s", name)
		}
	}
	if names["empty/"] == nil || names["world/level.dat"] == nil || names[".backup.checksum"] == nil {
		t.Fatalf("entries missing: %v", names)
	}

	// Ignore from .serviceignore, then the 32 KiB and symlink rules.
	writeFiles(t, dir, map[string]string{".serviceignore": "cache/\n"})
	id2 := newBackupID()
	n.backup(id2, "wings", "")
	if names := archiveNames(t, filepath.Join(n.Config.System.BackupDirectory, id2+".tar.gz")); names["cache/x.bin"] != nil || names["logs/latest.log"] == nil {
		t.Fatal(".serviceignore not applied")
	}
	writeFiles(t, dir, map[string]string{".serviceignore": "cache/\n" + strings.Repeat("#", 33<<10)})
	id3 := newBackupID()
	n.backup(id3, "local", "")
	if names := archiveNames(t, filepath.Join(n.Config.System.BackupDirectory, id3+".tar.gz")); names["cache/x.bin"] == nil {
		t.Fatal("an ignore file over 32 KiB was used")
	}
	writeFiles(t, dir, map[string]string{"real-ignore": "cache/\n"})
	os.Remove(filepath.Join(dir, ".serviceignore"))
	if err := os.Symlink("real-ignore", filepath.Join(dir, ".serviceignore")); err != nil {
		t.Fatal(err)
	}
	id4 := newBackupID()
	n.backup(id4, "local", "")
	if names := archiveNames(t, filepath.Join(n.Config.System.BackupDirectory, id4+".tar.gz")); names["cache/x.bin"] == nil {
		t.Fatal("an ignore file that is a symbolic link was used")
	}

	// Delete: bad id, absent, present.
	if res, _ := n.request("DELETE", "/api/servers/"+backupServer+"/backup/..%2f..%2fetc", nil, ""); res.StatusCode != 400 && res.StatusCode != 404 {
		t.Fatalf("delete with a bad id: %d", res.StatusCode)
	}
	if res, body := n.request("DELETE", "/api/servers/"+backupServer+"/backup/"+newBackupID(), nil, ""); res.StatusCode != 404 || !strings.Contains(string(body), "error") {
		t.Fatalf("delete of an absent backup: %d %s", res.StatusCode, body)
	}
	if res, _ := n.request("DELETE", "/api/servers/"+backupServer+"/backup/"+id, nil, ""); res.StatusCode != 204 {
		t.Fatalf("delete: %d", res.StatusCode)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("the archive is still there")
	}
	entries, _ := os.ReadDir(n.Config.System.BackupDirectory)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".wharf-partial-") {
			t.Fatalf("temporary left behind: %s", e.Name())
		}
	}
}

func TestBackupRestoreLocal(t *testing.T) {
	n := startNode(t, nodeOptions{servers: []devpanel.Server{gameServer(backupServer)}})
	dir := n.serverDir(backupServer)
	writeFiles(t, dir, map[string]string{"a.txt": "original a", "sub/b.txt": "original b"})
	old := time.Date(2019, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(filepath.Join(dir, "a.txt"), old, old)
	os.Chmod(filepath.Join(dir, "sub/b.txt"), 0o600)
	id := newBackupID()
	if st := n.backup(id, "local", ""); !st.Successful {
		t.Fatal("backup failed")
	}
	restore := func(body map[string]any) int {
		res, b := n.request("POST", "/api/servers/"+backupServer+"/backup/"+id+"/restore", body, "")
		if res.StatusCode != 202 {
			t.Logf("restore answered %d %s", res.StatusCode, b)
		}
		return res.StatusCode
	}

	// A missing backup: 404, and nothing truncated.
	res, _ := n.request("POST", "/api/servers/"+backupServer+"/backup/"+newBackupID()+"/restore", map[string]any{"adapter": "local", "truncate_directory": true}, "")
	if res.StatusCode != 404 {
		t.Fatalf("restore of a missing backup: %d", res.StatusCode)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.txt")); err != nil {
		t.Fatal("files were removed for a missing backup")
	}
	if res, _ := n.request("POST", "/api/servers/"+backupServer+"/backup/"+id+"/restore", map[string]any{"adapter": "object_store"}, ""); res.StatusCode != 400 {
		t.Fatalf("object_store without download_url: %d", res.StatusCode)
	}

	// Without truncate: changed files come back, new files stay.
	writeFiles(t, dir, map[string]string{"a.txt": "changed", "new.txt": "new"})
	if restore(map[string]any{"adapter": "local"}) != 202 {
		t.Fatal("restore refused")
	}
	if !n.waitRestoreStatus(id, 60*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "original a" {
		t.Fatalf("a.txt = %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "a.txt")); !fi.ModTime().Equal(old) {
		t.Fatalf("mtime %v", fi.ModTime())
	}
	if fi, _ := os.Stat(filepath.Join(dir, "sub/b.txt")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if _, err := os.Stat(filepath.Join(dir, "new.txt")); err != nil {
		t.Fatal("a file not in the backup was removed without truncate")
	}
	if _, err := os.Stat(filepath.Join(dir, ".backup.checksum")); err == nil {
		t.Fatal("integrity entry written to the server")
	}
	if d := n.details(backupServer); d["is_suspended"] != false {
		t.Fatalf("suspended after the restore: %v", d["is_suspended"])
	}

	// With truncate: only the backup's files remain.
	waitFor := len(n.Panel.CallsTo("POST", "/backups/"+id+"/restore"))
	if restore(map[string]any{"adapter": "wings", "truncate_directory": true}) != 202 {
		t.Fatal("restore refused")
	}
	waitCalls(t, n, "/backups/"+id+"/restore", waitFor+1)
	if _, err := os.Stat(filepath.Join(dir, "new.txt")); !os.IsNotExist(err) {
		t.Fatal("truncate kept a file")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub/b.txt")); string(b) != "original b" {
		t.Fatalf("b.txt = %q", b)
	}

	// A corrupt archive with truncate: reported failure, nothing removed.
	path := filepath.Join(n.Config.System.BackupDirectory, id+".tar.gz")
	data, _ := os.ReadFile(path)
	os.WriteFile(path, data[:len(data)/2], 0o600)
	writeFiles(t, dir, map[string]string{"keep.txt": "keep"})
	waitFor = len(n.Panel.CallsTo("POST", "/backups/"+id+"/restore"))
	if restore(map[string]any{"adapter": "local", "truncate_directory": true}) != 202 {
		t.Fatal("restore refused")
	}
	if ok := waitCalls(t, n, "/backups/"+id+"/restore", waitFor+1); ok {
		t.Fatal("a truncated archive was reported as restored")
	}
	if _, err := os.Stat(filepath.Join(dir, "keep.txt")); err != nil {
		t.Fatal("a corrupt archive emptied the directory")
	}
}

// waitCalls waits for the count-th restore status and returns its outcome.
func waitCalls(t *testing.T, n *node, path string, count int) bool {
	t.Helper()
	wait.For(t, 60*time.Second, func() bool { return len(n.Panel.CallsTo("POST", path)) >= count }, "status %d for %s\n%s", count, path, n.log)
	var st struct{ Successful bool }
	json.Unmarshal(n.Panel.CallsTo("POST", path)[count-1].Body, &st)
	return st.Successful
}

// serveArchive serves body with the content type, optionally cut short.
func serveArchive(t *testing.T, body []byte, contentType string, cut bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		if cut {
			w.Header().Set("Content-Length", "99999999")
			w.WriteHeader(200)
			w.Write(body[:len(body)/2])
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			hj, _ := w.(http.Hijacker)
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
			}
			return
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/backup.tar.gz?X-Amz-Signature=secret-signature"
}

func TestBackupRestoreObjectStoreDownload(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true,
		servers: []devpanel.Server{gameServer(backupServer)},
		mutate:  func(c *config.Config) { c.System.Backups.RestoreHostAllowlist = []string{"127.0.0.1"} },
	})
	dir := n.serverDir(backupServer)
	writeFiles(t, dir, map[string]string{"world/level.dat": "good level"})
	id := newBackupID()
	n.backup(id, "local", "")
	data, err := os.ReadFile(filepath.Join(n.Config.System.BackupDirectory, id+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"world/level.dat": "changed"})
	restore := func(url string) (int, string) {
		res, body := n.request("POST", "/api/servers/"+backupServer+"/backup/"+id+"/restore", map[string]any{"adapter": "s3", "download_url": url, "truncate_directory": true}, "")
		return res.StatusCode, string(body)
	}
	// Wrong content types: 400, nothing changed.
	for _, ct := range []string{"text/html", "gzip", "application", "x-gzip", ""} {
		code, body := restore(serveArchive(t, data, ct, false))
		if code != 400 {
			t.Fatalf("content type %q: %d %s", ct, code, body)
		}
		if strings.Contains(body, "secret-signature") || strings.Contains(n.log.String(), "secret-signature") {
			t.Fatal("the signed query leaked")
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "world/level.dat")); string(b) != "changed" {
		t.Fatal("a refused restore changed files")
	}
	// A good download.
	if code, body := restore(serveArchive(t, data, "application/x-gzip; charset=binary", false)); code != 202 {
		t.Fatalf("restore: %d %s", code, body)
	}
	if !n.waitRestoreStatus(id, 60*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "world/level.dat")); string(b) != "good level" {
		t.Fatalf("level.dat = %q", b)
	}
	// A stream cut short: reported failure, the daemon lives on.
	if code, body := restore(serveArchive(t, data, "application/gzip", true)); code != 202 {
		t.Fatalf("restore: %d %s", code, body)
	}
	if waitCalls(t, n, "/backups/"+id+"/restore", 2) {
		t.Fatal("a truncated download was reported as restored")
	}
	n.details(backupServer)
}

func TestBackupRestoreRefusesLoopbackWithoutAllowlist(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{gameServer(backupServer)}})
	id := newBackupID()
	url := serveArchive(t, []byte("x"), "application/gzip", false)
	for _, u := range []string{url, strings.Replace(url, "127.0.0.1", "[::ffff:127.0.0.1]", 1), "http://169.254.169.254/latest/meta-data", "http://100.64.0.1/x", "http://0.0.0.0:1/x", "file:///etc/passwd", "http://localhost:1/x"} {
		res, body := n.request("POST", "/api/servers/"+backupServer+"/backup/"+id+"/restore", map[string]any{"adapter": "object_store", "download_url": u}, "")
		if res.StatusCode != 400 {
			t.Fatalf("%s: %d %s", u, res.StatusCode, body)
		}
	}
	if calls := n.Panel.CallsTo("POST", "/backups/"+id+"/restore"); len(calls) != 0 {
		t.Fatal("a refused restore was reported")
	}
}

func TestBackupRestoreWriteLimitAndPowerRefused(t *testing.T) {
	testimages.RequireDocker(t)
	testimages.GameServer(context.Background(), t)
	removeContainersAtCleanup(t, backupServer) // it starts the server: leave no container behind
	n := startNode(t, nodeOptions{
		servers: []devpanel.Server{gameServer(backupServer)},
		mutate:  func(c *config.Config) { c.System.Backups.WriteLimit = 10; c.System.Backups.CompressionLevel = "none" },
	})
	dir := n.serverDir(backupServer)
	big := make([]byte, 50<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(dir, "world.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	id := newBackupID()
	n.backup(id, "local", "")

	// A running server is stopped first.
	if res, _ := n.request("POST", "/api/servers/"+backupServer+"/power", map[string]any{"action": "start"}, ""); res.StatusCode != 202 {
		t.Fatal("start refused")
	}
	n.waitState(backupServer, "running", 60*time.Second)
	start := time.Now()
	if res, body := n.request("POST", "/api/servers/"+backupServer+"/backup/"+id+"/restore", map[string]any{"adapter": "local"}, ""); res.StatusCode != 202 {
		t.Fatalf("restore: %d %s", res.StatusCode, body)
	}
	n.waitState(backupServer, "offline", 60*time.Second)
	stopped := time.Since(start)
	if d := n.details(backupServer); d["is_suspended"] != true {
		t.Fatal("not suspended during the restore")
	}
	for _, a := range []string{"start", "stop", "restart"} {
		if res, body := n.request("POST", "/api/servers/"+backupServer+"/power", map[string]any{"action": a}, ""); res.StatusCode != 409 {
			t.Fatalf("%s during a restore: %d %s", a, res.StatusCode, body)
		}
	}
	if !n.waitRestoreStatus(id, 60*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
	took := time.Since(start) - stopped
	t.Logf("50 MiB restored at 10 MiB/s in %s (after %s to stop the server)", took, stopped)
	if took < 3500*time.Millisecond || took > 10*time.Second {
		t.Fatalf("restore took %s, want about 4-5 s", took)
	}
	if d := n.details(backupServer); d["is_suspended"] != false {
		t.Fatal("still suspended after the restore")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "world.bin")); !bytes.Equal(got, big) {
		t.Fatal("restored content differs")
	}
}

func TestBackupKill9LeavesNoArchive(t *testing.T) {
	n := startNode(t, nodeOptions{
		servers: []devpanel.Server{gameServer(backupServer)},
		mutate:  func(c *config.Config) { c.System.Backups.CompressionLevel = "best_compression" },
	})
	dir := n.serverDir(backupServer)
	for i := range 8 {
		big := make([]byte, 16<<20)
		rand.Read(big)
		os.WriteFile(filepath.Join(dir, "data"+string(rune('a'+i))), big, 0o644)
	}
	id := newBackupID()
	if res, _ := n.request("POST", "/api/servers/"+backupServer+"/backup", map[string]any{"adapter": "local", "uuid": id}, ""); res.StatusCode != 202 {
		t.Fatal("backup refused")
	}
	bdir := n.Config.System.BackupDirectory
	wait.For(t, 20*time.Second, func() bool {
		entries, _ := os.ReadDir(bdir)
		return slices.ContainsFunc(entries, func(e os.DirEntry) bool {
			fi, _ := e.Info()
			return strings.HasPrefix(e.Name(), ".wharf-partial-") && fi != nil && fi.Size() > 0
		})
	}, "the backup to start writing")
	if err := n.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-n.exited
	if _, err := os.Stat(filepath.Join(bdir, id+".tar.gz")); !os.IsNotExist(err) {
		t.Fatal("a partial archive is under the final name")
	}
	// The next boot removes the partial file.
	n.restart()
	entries, _ := os.ReadDir(bdir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".wharf-partial-") {
			t.Fatalf("partial archive left after a restart: %s", e.Name())
		}
	}
}
