package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// Symbolic links planted in the server's directory (by the game, or an
// archive) that lead out of it: no SFTP operation reads, creates, changes
// or removes anything outside through them (attacks.md F3-F6).
func TestSFTPSymlinkEscapes(t *testing.T) {
	t.Parallel()
	n, c := ownerNode(t, nil)
	dir := n.serverDir(sftpSrvA)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	os.WriteFile(secret, []byte("host secret"), 0o600)
	os.Mkdir(filepath.Join(outside, "sub"), 0o700)
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	os.Chtimes(secret, old, old)
	writeFiles(t, dir, map[string]string{"ok.txt": "ok"})
	for link, target := range map[string]string{
		"dangling": filepath.Join(outside, "created"),  // F3: a dangling link to the outside
		"chain1":   "chain2",                           // F3: a two-hop chain
		"chain2":   filepath.Join(outside, "chained"),  //
		"dirlink":  outside,                            // F4/F5: a directory outside
		"filelink": secret,                             // F5/F6: a file outside
		"rel":      "../../../../../../../../../../..", // relative climb to /
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}

	refused := func(name string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s through an escaping link succeeded", name)
		}
	}
	// Reads.
	for _, p := range []string{"/filelink", "/dirlink/secret.txt", "/chain1", "/rel/etc/passwd"} {
		_, err := getFile(c, p)
		refused("read "+p, err)
		_, err = c.Stat(p)
		refused("stat "+p, err)
	}
	_, err := c.ReadDir("/dirlink")
	refused("list /dirlink", err)
	_, err = c.ReadDir("/rel")
	refused("list /rel", err)
	// Writes and creations.
	for _, p := range []string{"/dangling", "/chain1", "/dirlink/new.txt", "/filelink", "/rel/tmp/x"} {
		f, err := c.Create(p)
		if err == nil {
			f.Write([]byte("pwned"))
			f.Close()
		}
		refused("create "+p, err)
		f, err = c.OpenFile(p, os.O_WRONLY)
		if err == nil {
			f.Write([]byte("pwned"))
			f.Close()
		}
		refused("open for writing "+p, err)
	}
	refused("mkdir /dirlink/newdir", c.Mkdir("/dirlink/newdir"))
	refused("mkdir /dangling/x", c.MkdirAll("/dangling/x"))
	refused("rename into /dirlink", c.Rename("/ok.txt", "/dirlink/moved.txt"))
	refused("rename out of /dirlink", c.Rename("/dirlink/secret.txt", "/stolen.txt"))
	refused("symlink into /dirlink", c.Symlink("ok.txt", "/dirlink/l"))
	// An absolute target means a name under the root, as every SFTP path
	// does: it is stored relative and never names the host's directory.
	if err := c.Symlink(outside, "/newlink"); err != nil {
		t.Errorf("symlink to an absolute in-root name: %v", err)
	} else if target, _ := os.Readlink(filepath.Join(dir, "newlink")); filepath.IsAbs(target) {
		t.Errorf("stored target %q is absolute", target)
	}
	_, err = getFile(c, "/newlink/secret.txt")
	refused("read through the new link", err)
	refused("symlink climbing out", c.Symlink("../../..", "/newlink2"))
	// Changes of metadata (F6): never through the link.
	refused("chmod /filelink", c.Chmod("/filelink", 0o777))
	refused("chmod /dirlink/secret.txt", c.Chmod("/dirlink/secret.txt", 0o777))
	refused("chtimes /filelink", c.Chtimes("/filelink", time.Now(), time.Now()))
	refused("truncate /filelink", c.Truncate("/filelink", 0))
	refused("chmod /dirlink", c.Chmod("/dirlink", 0o777))
	// Deletion (F4): never of what a link points to.
	refused("remove /dirlink/secret.txt", c.Remove("/dirlink/secret.txt"))
	refused("rmdir /dirlink/sub", c.RemoveDirectory("/dirlink/sub"))
	refused("rmdir /dirlink", c.RemoveDirectory("/dirlink"))
	// Removing the link itself is fine and leaves the target.
	if err := c.Remove("/filelink"); err != nil {
		t.Errorf("remove of the link itself: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "filelink")); !os.IsNotExist(err) {
		t.Error("the link was not removed")
	}

	// The outside is exactly as it was.
	entries, _ := os.ReadDir(outside)
	if len(entries) != 2 {
		t.Errorf("outside now holds %v", entries)
	}
	fi, err := os.Stat(secret)
	if err != nil || fi.Mode().Perm() != 0o600 || !fi.ModTime().Equal(old) || fi.Size() != int64(len("host secret")) {
		t.Errorf("outside file changed: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(outside, "sub")); err != nil {
		t.Error("outside directory removed")
	}
	if _, err := os.Stat(filepath.Join(dir, "stolen.txt")); err == nil {
		t.Error("a file was moved in from the outside")
	}
	if n.exitedEarly() {
		t.Fatal("the daemon died")
	}
}

func (n *node) exitedEarly() bool {
	select {
	case <-n.exited:
		return true
	default:
		return false
	}
}

// Malformed SSH input (attacks.md D5): a subsystem request whose payload
// is shorter than its length field, other channel requests and unknown
// channel types are refused; the daemon keeps serving.
func TestSFTPMalformedRequests(t *testing.T) {
	t.Parallel()
	n, _ := ownerNode(t, nil)
	c, err := n.sshDial(sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.OpenChannel("direct-tcpip", nil); err == nil {
		t.Fatal("a direct-tcpip channel was accepted")
	}
	if _, _, err := c.OpenChannel("x-unknown@example.com", []byte{1, 2, 3}); err == nil {
		t.Fatal("an unknown channel type was accepted")
	}
	for _, payload := range [][]byte{nil, {0}, {0, 0}, {0, 0, 0}, {0, 0, 0, 9, 's', 'f'}, {0xff, 0xff, 0xff, 0xff}, {0, 0, 0, 4, 's', 'h', 'e', 'l'}} {
		ch, reqs, err := c.OpenChannel("session", nil)
		if err != nil {
			t.Fatalf("session channel: %v", err)
		}
		go ssh.DiscardRequests(reqs)
		ok, err := ch.SendRequest("subsystem", true, payload)
		if err != nil || ok {
			t.Fatalf("subsystem request %v: ok=%v err=%v", payload, ok, err)
		}
		for _, req := range []string{"shell", "exec", "pty-req", "env"} {
			if ok, _ := ch.SendRequest(req, true, payload); ok {
				t.Fatalf("%s accepted", req)
			}
		}
		ch.Close()
	}
	// Garbage on the SFTP stream ends that session only.
	ch, reqs, err := c.OpenChannel("session", nil)
	if err != nil {
		t.Fatal(err)
	}
	go ssh.DiscardRequests(reqs)
	if ok, _ := ch.SendRequest("subsystem", true, ssh.Marshal(struct{ Name string }{"sftp"})); !ok {
		t.Fatal("sftp subsystem refused")
	}
	ch.Write([]byte{0, 0, 0, 1, 0xff})
	ch.Write(bytes.Repeat([]byte{0xff}, 1000))
	ch.Close()
	if n.exitedEarly() {
		t.Fatalf("the daemon died\n%s", n.log)
	}
	s := n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
	if _, err := s.Stat("/"); err != nil {
		t.Fatalf("the daemon stopped serving: %v", err)
	}
}

// Failed logins from one address are limited: after the burst the panel
// is not asked any more, and even the right password is refused.
func TestSFTPFailedLoginsRateLimited(t *testing.T) {
	t.Parallel()
	n, _ := ownerNode(t, nil)
	before := len(n.Panel.CallsTo("POST", "/sftp/auth"))
	const burst = 10
	for i := range burst {
		if c, err := n.sshDial(sftpLogin("alice", sftpSrvA), ssh.Password("wrong")); err == nil {
			c.Close()
			t.Fatalf("attempt %d accepted", i)
		}
	}
	if got := len(n.Panel.CallsTo("POST", "/sftp/auth")) - before; got != burst {
		t.Fatalf("the panel was asked %d times for %d failed logins", got, burst)
	}
	for range 3 {
		if c, err := n.sshDial(sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass)); err == nil {
			c.Close()
			t.Fatal("a login was accepted past the limit")
		}
	}
	if got := len(n.Panel.CallsTo("POST", "/sftp/auth")) - before; got != burst {
		t.Fatalf("the panel was asked %d times, want %d", got, burst)
	}
}
