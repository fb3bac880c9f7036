package e2e

import (
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
)

// The sftp events are recorded, merged per (user, server, ip, event,
// minute) and sent to the panel with the other activity.
func TestSFTPActivityMergedAndSent(t *testing.T) {
	t.Parallel()
	// Records are taken while delivery is off, then delivered after a
	// restart in one batch: the merge does not depend on timing.
	// The merge window (a minute) is widened to a century, so that the
	// records never straddle a minute boundary (the per-minute split is
	// tested in internal/activity).
	n, c := ownerNode(t, func(c *config.Config) {
		c.System.ActivitySendInterval = 3600
		c.Testing.ActivityMergeWindowS = 100 * 365 * 24 * 3600
	})
	if err := c.Mkdir("/d"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"/d/a", "/d/b", "/d/c"} {
		putFile(t, c, f, []byte(f))
	}
	putFile(t, c, "/d/a", []byte("again"))
	if err := c.Rename("/d/b", "/d/b2"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove("/d/c"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove("/d/b2"); err != nil {
		t.Fatal(err)
	}
	c.close()
	n.stop()
	cfg, err := config.Load(n.CfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg.System.ActivitySendInterval = 1
	if err := cfg.Save(n.CfgPath); err != nil {
		t.Fatal(err)
	}
	n.restart()
	call, ok := n.Panel.WaitForCall("POST", "/activity", 15*time.Second)
	if !ok {
		t.Fatalf("no activity sent\n%s", n.log)
	}
	var body struct {
		Data []struct {
			User      *string        `json:"user"`
			Server    string         `json:"server"`
			Event     string         `json:"event"`
			Metadata  map[string]any `json:"metadata"`
			IP        string         `json:"ip"`
			Timestamp time.Time      `json:"timestamp"`
		} `json:"data"`
	}
	if err := json.Unmarshal(call.Body, &body); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range body.Data {
		if a.User == nil || *a.User != sftpOwner || a.Server != sftpSrvA || a.IP != "127.0.0.1" || a.Timestamp.IsZero() {
			t.Errorf("record %+v", a)
		}
		if _, dup := got[a.Event]; dup {
			t.Errorf("%s sent twice: not merged", a.Event)
		}
		files, _ := json.Marshal(a.Metadata["files"])
		got[a.Event] = string(files)
	}
	want := map[string]string{
		"server:sftp.create-directory": `["/d"]`,
		"server:sftp.create":           `["/d/a","/d/b","/d/c"]`,
		"server:sftp.write":            `["/d/a"]`,
		"server:sftp.rename":           `[{"from":"/d/b","to":"/d/b2"}]`,
		"server:sftp.delete":           `["/d/c","/d/b2"]`,
	}
	for ev, files := range want {
		if got[ev] != files {
			t.Errorf("%s: files %s, want %s", ev, got[ev], files)
		}
	}
	if len(got) != len(want) {
		t.Errorf("events %v", got)
	}
}

// OpenSSH's own sftp client, in batch mode with a key, against the daemon.
func TestSFTPOpenSSHClient(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sftp"); err != nil {
		t.Fatal("OpenSSH's sftp client is needed (Debian openssh-client)")
	}
	signer, priv := newSSHKey(t)
	n := startSFTPNode(t, nil, sftpServerDef(sftpSrvA, 0, nil))
	n.Panel.SetSFTPUsers(devpanel.SFTPUser{Username: "alice", Keys: []string{authorizedKey(signer)}, Server: sftpSrvA, User: sftpOwner, Permissions: []string{"*"}})
	n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.PublicKeys(signer)) // the listener is up

	tmp := t.TempDir()
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(tmp, "id_ed25519")
	os.WriteFile(keyPath, pem.EncodeToMemory(blk), 0o600)
	payload := strings.Repeat("a line of a world file\n", 50000)
	os.WriteFile(filepath.Join(tmp, "up.txt"), []byte(payload), 0o644)

	run := func(batch string) string {
		t.Helper()
		bf := filepath.Join(tmp, "batch")
		os.WriteFile(bf, []byte(batch), 0o644)
		cmd := exec.Command("sftp", "-F", "/dev/null", "-b", bf, "-i", keyPath, "-P", strings.Split(n.sftpAddr(), ":")[1],
			"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes",
			"-o", "BatchMode=yes", sftpLogin("alice", sftpSrvA)+"@127.0.0.1")
		cmd.Dir = tmp
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sftp: %v\n%s\ndaemon log:\n%s", err, out, n.log)
		}
		return string(out)
	}
	out := run("mkdir plugins\nput up.txt plugins/up.txt\nrename plugins/up.txt plugins/world.txt\nchmod 600 plugins/world.txt\nls -l plugins\nget plugins/world.txt back.txt\n")
	if !strings.Contains(out, "world.txt") {
		t.Fatalf("ls output:\n%s", out)
	}
	dir := n.serverDir(sftpSrvA)
	if got, _ := os.ReadFile(filepath.Join(dir, "plugins/world.txt")); string(got) != payload {
		t.Fatalf("uploaded file on disk: %d bytes", len(got))
	}
	if fi, _ := os.Stat(filepath.Join(dir, "plugins/world.txt")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if got, _ := os.ReadFile(filepath.Join(tmp, "back.txt")); string(got) != payload {
		t.Fatalf("downloaded file: %d bytes", len(got))
	}
	run("rm plugins/world.txt\nrmdir plugins\n")
	entries, _ := os.ReadDir(dir)
	names := []string{}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if len(names) != 0 {
		t.Fatalf("left on disk: %v", names)
	}
}
