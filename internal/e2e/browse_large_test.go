package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
)

// TestBrowseBackupsTooLargeAttack: a game that made more than 100,000
// entries cannot make browsing its backup build a tree of them (the
// view's bound, docs/backup-browsing.md): the file manager answers 413
// with a JSON error that says to restore it whole, SFTP refuses the
// listing, and the daemon answers on both faces after it. Control: the
// same node lists a backup of the same tree minus 2,000 entries (under
// the bound), so the 413 is the bound, not a broken backup.
func TestBrowseBackupsTooLargeAttack(t *testing.T) {
	t.Parallel()
	srv := gameServer(backupServer)
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{srv},
		mutate: func(c *config.Config) { c.System.Backups.Format = config.BackupFormatRepository }})
	dir := n.serverDir(backupServer)
	// 99 directories of 1,000 empty files: 99,099 entries, under the bound.
	mkFiles := func(from, to int) {
		for d := from; d < to; d++ {
			sub := filepath.Join(dir, fmt.Sprintf("d%03d", d))
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 1000; i++ {
				if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%04d", i)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	mkFiles(0, 99)
	under := newBackupID()
	if st := n.backup(under, "local", ""); !st.Successful {
		t.Fatalf("backup: %+v\n%s", st, n.log)
	}
	// Two more directories: 101,101 entries, over the bound.
	mkFiles(99, 101)
	over := newBackupID()
	if st := n.backup(over, "local", ""); !st.Successful {
		t.Fatalf("backup: %+v\n%s", st, n.log)
	}

	if code, l, body := n.list("/.backups/" + under + "/d000"); code != 200 || len(l) != 1000 {
		t.Fatalf("control: listing a backup under the bound: %d, %d entries: %.300s", code, len(l), body)
	}
	code, _, body := n.list("/.backups/" + over)
	if code != 413 || !bytes.Contains(body, []byte(`"error"`)) || !bytes.Contains(body, []byte("too large to browse")) {
		t.Fatalf("listing a backup over the bound: %d %s", code, body)
	}
	if code, _, body := n.list("/.backups/" + over + "/d100"); code != 413 {
		t.Fatalf("listing inside a backup over the bound: %d %s", code, body)
	}

	n.Panel.SetSFTPUsers(devpanel.SFTPUser{Username: "alice", Password: sftpPass, Server: backupServer, User: sftpOwner, Permissions: []string{"*"}})
	c := n.sftpOpen(t, sftpLogin("alice", backupServer), ssh.Password(sftpPass))
	if _, err := c.ReadDir("/.backups/" + over); err == nil {
		t.Fatal("sftp: a backup over the bound was listed")
	}
	if l, err := c.ReadDir("/.backups/" + under + "/d098"); err != nil || len(l) != 1000 {
		t.Fatalf("sftp after the refusal: %d entries, %v", len(l), err)
	}
	if code, l, body := n.list("/"); code != 200 || len(l) < 101 {
		t.Fatalf("the file manager after the refusal: %d %.300s", code, body)
	}
}
