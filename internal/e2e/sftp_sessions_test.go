package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
)

func twoUsersNode(t *testing.T, mutate func(c *config.Config)) *node {
	t.Helper()
	n := startSFTPNode(t, mutate, sftpServerDef(sftpSrvA, 0, nil), sftpServerDef(sftpSrvB, 0, nil))
	var users []devpanel.SFTPUser
	for _, srv := range []string{sftpSrvA, sftpSrvB} {
		users = append(users,
			devpanel.SFTPUser{Username: "alice", Password: sftpPass, Server: srv, User: sftpOwner, Permissions: []string{"*"}},
			devpanel.SFTPUser{Username: "bob", Password: sftpOther2, Server: srv, User: sftpOther, Permissions: []string{"*"}})
	}
	n.Panel.SetSFTPUsers(users...)
	return n
}

func stillOpen(t *testing.T, s *sftpSession, what string) {
	t.Helper()
	if _, err := s.Stat("/"); err != nil {
		t.Fatalf("%s: a session that should stay open failed: %v", what, err)
	}
}

// Deauthorizing a user closes that user's sessions on the named servers
// (or all), at once; other users stay; the daemon's shutdown closes the rest.
func TestSFTPDeauthorizeClosesSessions(t *testing.T) {
	t.Parallel()
	n := twoUsersNode(t, nil)
	aliceA := n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
	aliceB := n.sftpOpen(t, sftpLogin("alice", sftpSrvB), ssh.Password(sftpPass))
	bobA := n.sftpOpen(t, sftpLogin("bob", sftpSrvA), ssh.Password(sftpOther2))

	if res, body := n.request("POST", "/api/deauthorize-user", map[string]any{"user": sftpOwner, "servers": []string{sftpSrvA}}, ""); res.StatusCode != 204 {
		t.Fatalf("deauthorize: %d %s", res.StatusCode, body)
	}
	waitClosed(t, aliceA.ssh, time.Second, "deauthorize on A")
	stillOpen(t, aliceB, "alice on B")
	stillOpen(t, bobA, "bob on A")

	if res, _ := n.request("POST", "/api/deauthorize-user", map[string]any{"user": sftpOwner}, ""); res.StatusCode != 204 {
		t.Fatal("deauthorize everywhere")
	}
	waitClosed(t, aliceB.ssh, time.Second, "deauthorize everywhere")
	stillOpen(t, bobA, "bob on A")

	// A revoked password no longer logs in (the panel refuses; nothing is cached).
	n.Panel.SetSFTPUsers()
	if c, err := n.sshDial(sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass)); err == nil {
		c.Close()
		t.Fatal("a revoked login was accepted")
	}

	// Shutdown closes the open session and the daemon exits cleanly.
	n.stop()
	waitClosed(t, bobA.ssh, 5*time.Second, "daemon shutdown")
}

// A suspension seen by a sync closes every session of the server at once,
// and new logins are refused; deleting a server closes its sessions.
func TestSFTPSuspendAndDeleteCloseSessions(t *testing.T) {
	t.Parallel()
	n := twoUsersNode(t, nil)
	aliceA := n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
	bobA := n.sftpOpen(t, sftpLogin("bob", sftpSrvA), ssh.Password(sftpOther2))
	aliceB := n.sftpOpen(t, sftpLogin("alice", sftpSrvB), ssh.Password(sftpPass))

	n.Panel.UpdateSettings(sftpSrvA, "suspended", true)
	if res, body := n.request("POST", "/api/servers/"+sftpSrvA+"/sync", nil, ""); res.StatusCode/100 != 2 {
		t.Fatalf("sync: %d %s", res.StatusCode, body)
	}
	waitClosed(t, aliceA.ssh, time.Second, "suspension")
	waitClosed(t, bobA.ssh, time.Second, "suspension")
	stillOpen(t, aliceB, "alice on B")
	// Refused whether or not the panel notices the suspension itself.
	n.Panel.UpdateSettings(sftpSrvA, "suspended", false)
	if c, err := n.sshDial(sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass)); err == nil {
		c.Close()
		t.Fatal("login to a suspended server accepted")
	}

	if res, body := n.request("DELETE", "/api/servers/"+sftpSrvB, nil, ""); res.StatusCode != 204 {
		t.Fatalf("delete: %d %s", res.StatusCode, body)
	}
	waitClosed(t, aliceB.ssh, 2*time.Second, "deletion")
}

// No user write reaches the files while a restore rewrites them (an
// exclusive job holds the server); listing goes on; writes work again after.
func TestSFTPWritesRefusedDuringRestore(t *testing.T) {
	t.Parallel()
	n := startSFTPNode(t, func(c *config.Config) { c.System.Backups.WriteLimit = 2 }, sftpServerDef(backupServer, 0, nil))
	n.Panel.SetSFTPUsers(devpanel.SFTPUser{Username: "alice", Password: sftpPass, Server: backupServer, User: sftpOwner, Permissions: []string{"*"}})
	dir := n.serverDir(backupServer)
	// Incompressible data, so the restore writes ~8 MiB at 2 MB/s.
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i*7919 ^ i>>8)
	}
	if err := os.WriteFile(filepath.Join(dir, "world.dat"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("keep"), 0o644)
	id := newBackupID()
	if st := n.backup(id, "local", ""); !st.Successful {
		t.Fatal("backup failed")
	}
	c := n.sftpOpen(t, sftpLogin("alice", backupServer), ssh.Password(sftpPass))
	if res, body := n.request("POST", "/api/servers/"+backupServer+"/backup/"+id+"/restore", map[string]any{"adapter": "local"}, ""); res.StatusCode != 202 {
		t.Fatalf("restore: %d %s", res.StatusCode, body)
	}
	for name, err := range map[string]error{
		"create": func() error { _, err := c.Create("/new.txt"); return err }(),
		"mkdir":  c.Mkdir("/nd"), "remove": c.Remove("/keep.txt"), "rename": c.Rename("/keep.txt", "/k2"),
		"chmod": c.Chmod("/keep.txt", 0o600),
	} {
		if fxCode(err) != 3 {
			t.Errorf("%s during a restore: %v, want permission denied", name, err)
		}
	}
	if _, err := c.Stat("/keep.txt"); err != nil {
		t.Errorf("stat during a restore: %v", err)
	}
	if _, err := c.ReadDir("/"); err != nil {
		t.Errorf("list during a restore: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.txt")); !os.IsNotExist(err) {
		t.Error("a file was created during the restore")
	}
	if !n.waitRestoreStatus(id, 60*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
	putFile(t, c, "/after.txt", []byte("after"))
}
