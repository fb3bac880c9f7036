package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// A transfer carries the backups the panel selected and the install log,
// in Pelican Wings' part names (pelican-dev/wings server/transfer/source.go
// and archive.go as the source, router/router_transfer.go as the target):
// the backup arrives byte for byte and restores on the target, a selected
// backup that is not on the source (an object-store one) is skipped, and
// the admin's install log viewer shows the log on the target. With live
// transfers on, selected backups make it a classic transfer.
func TestTransferCarriesBackupsAndInstallLog(t *testing.T) {
	t.Run("classic", func(t *testing.T) { transferCarriesBackups(t, false) })
	t.Run("live on", func(t *testing.T) { transferCarriesBackups(t, true) })
}

func transferCarriesBackups(t *testing.T, live bool) {
	const id = "7a0000b1-0000-4000-8000-0000000000b1"
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, func(_ string, cfg *config.Config) { cfg.System.Transfers.Live = live })
	writeFiles(t, c.Source.dataDir(id), map[string]string{"world.dat": "the world as backed up", "sub/b.txt": "b"})
	backupID, missing := newBackupID(), newBackupID()
	c.backupOnSource(t, id, backupID)
	srcArchive, err := os.ReadFile(filepath.Join(c.Source.Config.System.BackupDirectory, backupID+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(c.Source.Config.System.LogDirectory, "install")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		t.Fatal(err)
	}
	installLog := "Wharf installation log\n\nScript output:\ninstalled on the source node\n"
	if err := os.WriteFile(filepath.Join(logDir, id+".log"), []byte(installLog), 0o600); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, c.Source.dataDir(id), map[string]string{"world.dat": "the world after the backup"})

	// A backup that is not a UUID is the panel's mistake: 422, as the
	// other fields of the request, and nothing starts.
	res, body := c.Source.request("POST", "/api/servers/"+id+"/transfer", map[string]any{
		"url": c.Target.URL + "/api/transfers", "token": "Bearer " + c.transferJWT(id), "backups": []string{"../" + backupID},
	}, "")
	if res.StatusCode != 422 || !strings.Contains(string(body), "backups must be backup UUIDs") {
		t.Fatalf("a backup that is not a UUID: %d %s", res.StatusCode, body)
	}
	res, body = c.Source.request("POST", "/api/servers/"+id+"/transfer", map[string]any{
		"url": c.Target.URL + "/api/transfers", "token": "Bearer " + c.transferJWT(id), "backups": []string{backupID, missing},
	}, "")
	if res.StatusCode != 202 {
		t.Fatalf("start transfer: %d %s", res.StatusCode, body)
	}
	c.waitReports(c.Target, id, []string{"success"}, 60*time.Second)

	got, err := os.ReadFile(filepath.Join(c.Target.Config.System.BackupDirectory, backupID+".tar.gz"))
	if err != nil || !bytes.Equal(got, srcArchive) {
		t.Fatalf("the backup did not arrive intact on the target: %v (%d bytes, want %d)", err, len(got), len(srcArchive))
	}
	if _, err := os.Stat(filepath.Join(c.Target.Config.System.BackupDirectory, missing+".tar.gz")); err == nil {
		t.Fatal("a backup the source does not have arrived")
	}
	c.Source.waitDaemonLog(`msg="a backup selected for the transfer is not on this node; not sent" server=`+id+` direction=outgoing backup=`+missing, 10*time.Second)
	c.Source.waitDaemonLog(`Streaming backup 1/1 to destination: `+backupID, 10*time.Second)
	if live {
		c.Source.waitDaemonLog(`msg="backups go along: classic transfer" server=`+id+` direction=outgoing backups=1`, 10*time.Second)
	}
	res, body = c.Target.request("GET", "/api/servers/"+id+"/install-logs", nil, "")
	var logAnswer struct{ Data string }
	if res.StatusCode != 200 || json.Unmarshal(body, &logAnswer) != nil || !strings.Contains(logAnswer.Data, "installed on the source node") {
		t.Fatalf("install log on the target: %d %s", res.StatusCode, body)
	}

	// The carried backup restores on the target.
	if b, _ := os.ReadFile(filepath.Join(c.Target.dataDir(id), "world.dat")); string(b) != "the world after the backup" {
		t.Fatalf("world.dat on the target before the restore: %q", b)
	}
	res, body = c.Target.request("POST", "/api/servers/"+id+"/backup/"+backupID+"/restore", map[string]any{"adapter": "wings", "truncate_directory": false}, "")
	if res.StatusCode != 202 {
		t.Fatalf("restore on the target: %d %s", res.StatusCode, body)
	}
	if call, ok := c.Panel.WaitForCall("POST", "/backups/"+backupID+"/restore", 60*time.Second); !ok || !strings.Contains(string(call.Body), `"successful":true`) {
		t.Fatalf("the restore of the carried backup failed\n%s", c.Target.log)
	}
	if b, _ := os.ReadFile(filepath.Join(c.Target.dataDir(id), "world.dat")); string(b) != "the world as backed up" {
		t.Fatalf("world.dat after the restore: %q", b)
	}
}

// backupOnSource makes a local backup of server id on the source node
// through the API and waits until the panel is told it succeeded.
func (c *cluster) backupOnSource(t *testing.T, id, backupID string) {
	t.Helper()
	res, body := c.Source.request("POST", "/api/servers/"+id+"/backup", map[string]any{"adapter": "wings", "uuid": backupID, "ignore": ""}, "")
	if res.StatusCode != 202 {
		t.Fatalf("backup: %d %s", res.StatusCode, body)
	}
	if call, ok := c.Panel.WaitForCall("POST", "/backups/"+backupID, 60*time.Second); !ok || !strings.Contains(string(call.Body), `"successful":true`) {
		t.Fatalf("the backup on the source failed\n%s", c.Source.log)
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// postForm sends a hand-made transfer form to the target's /api/transfers.
func (c *cluster) postForm(id string, parts [][2]string) (int, string) {
	t := c.Target.t
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		var w interface{ Write([]byte) (int, error) }
		var err error
		if p[0] == "archive" || strings.HasPrefix(p[0], "backup_") || p[0] == "install_logs" {
			w, err = mw.CreateFormFile(p[0], "file")
		} else {
			w, err = mw.CreateFormField(p[0])
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(p[1]))
	}
	_ = mw.Close()
	req, err := http.NewRequest("POST", c.Target.URL+"/api/transfers", &buf)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.transferJWT(id))
	req.Header.Set("Content-Type", mw.FormDataContentType())
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var e struct {
		Error string `json:"error"`
	}
	_ = json.NewDecoder(res.Body).Decode(&e)
	return res.StatusCode, e.Error
}

// A source (or anyone holding a transfer token) sends a form whose backup
// part is named as a path, or a backup that does not match its checksum:
// the target refuses the transfer with 400, writes nothing outside its
// backup directory and keeps no part of the refused backup (attacks.md F8;
// Pelican Wings keeps the base name of such a part, Wharf refuses it). A
// Pterodactyl Wings form (only `checksum`) is still accepted.
func TestTransferRefusesHostileBackupParts(t *testing.T) {
	const id = "7a0000b2-0000-4000-8000-0000000000b2"
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, nil)
	arcBytes := wingsArchive(t, map[string]string{"a.txt": "hello"})
	arc, sum := string(arcBytes), sha256Hex(arcBytes)
	backupID := newBackupID()
	backupBytes := wingsArchive(t, map[string]string{"a.txt": "from a backup"})
	backupData := string(backupBytes)
	root := filepath.Dir(c.Target.CfgPath)
	pwn := "pwn-" + backupID[:8]
	fdsBefore := c.Target.openFDs()

	status, msg := c.postForm(id, [][2]string{{"archive", arc}, {"checksum", sum}, {"checksum_archive", sum},
		{"backup_../../../../../../../../tmp/" + pwn, backupData}, {"checksum_backup_../../../../../../../../tmp/" + pwn, sha256Hex(backupBytes)}})
	if status != 400 || !strings.Contains(msg, "invalid backup part name") {
		t.Fatalf("a backup part named as a path: %d %q, want 400", status, msg)
	}
	c.Target.assertGone(id)

	status, msg = c.postForm(id, [][2]string{{"archive", arc}, {"checksum_archive", sum},
		{"backup_" + backupID + ".tar.gz", backupData}, {"checksum_backup_" + backupID + ".tar.gz", strings.Repeat("0", 64)}})
	if status != 400 || !strings.Contains(msg, "checksums don't match") {
		t.Fatalf("a backup with a wrong checksum: %d %q, want 400", status, msg)
	}
	c.Target.assertGone(id)
	if _, err := os.Lstat(filepath.Join(c.Target.Config.System.BackupDirectory, backupID+".tar.gz")); err == nil {
		t.Fatal("a backup with a wrong checksum was kept")
	}

	// Nothing of either attack is on the disk: no file named after the
	// path, anywhere under the node's directories or in /tmp, and no staged
	// backup left in the backup directory.
	nothingLeft := func() {
		t.Helper()
		if _, err := os.Lstat("/tmp/" + pwn); err == nil {
			t.Fatal("a part name became a path in /tmp")
		}
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && (strings.Contains(d.Name(), "pwn") || strings.HasPrefix(d.Name(), ".wharf-partial-") || strings.HasPrefix(d.Name(), backupID)) {
				t.Errorf("left on the disk: %s", p)
			}
			return nil
		})
	}
	nothingLeft()

	// Every descriptor the refused transfers open is closed: twenty more
	// leave at most the pooled connections to the panel.
	for i := range 10 {
		if status, _ := c.postForm(id, [][2]string{{"archive", arc}, {"checksum", sum}, {"backup_../" + pwn, backupData}}); status != 400 {
			t.Fatalf("attempt %d: %d", i, status)
		}
		if status, _ := c.postForm(id, [][2]string{{"archive", arc}, {"checksum", sum}, {"backup_" + backupID + ".tar.gz", backupData}}); status != 400 {
			t.Fatalf("attempt %d without a backup checksum: %d", i, status)
		}
	}
	if !wait.Until(10*time.Second, func() bool { return c.Target.openFDs() <= fdsBefore+4 }) {
		t.Fatalf("descriptors: %d before the attack, %d after", fdsBefore, c.Target.openFDs())
	}
	nothingLeft()

	// The control: a Pterodactyl Wings form is accepted, and the target
	// stays whole.
	status, msg = c.postForm(id, [][2]string{{"archive", arc}, {"checksum", sum}})
	if status != 200 {
		t.Fatalf("a Pterodactyl Wings form: %d %q, want 200", status, msg)
	}
	if b, err := os.ReadFile(filepath.Join(c.Target.dataDir(id), "a.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("a.txt on the target: %q %v", b, err)
	}
	c.Target.assertAnswersEveryFace(t, id)
}
