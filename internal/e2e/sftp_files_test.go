package e2e

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
)

func ownerNode(t *testing.T, mutate func(c *config.Config), servers ...devpanel.Server) (*node, *sftpSession) {
	t.Helper()
	if len(servers) == 0 {
		servers = []devpanel.Server{sftpServerDef(sftpSrvA, 0, nil)}
	}
	n := startSFTPNode(t, mutate, servers...)
	n.Panel.SetSFTPUsers(devpanel.SFTPUser{Username: "alice", Password: sftpPass, Server: servers[0].UUID, User: sftpOwner, Permissions: []string{"*"}})
	return n, n.sftpOpen(t, sftpLogin("alice", servers[0].UUID), ssh.Password(sftpPass))
}

// Upload, download, rename, remove, mkdir, rmdir and setstat, each
// checked on disk.
func TestSFTPFileRoundTrips(t *testing.T) {
	t.Parallel()
	n, c := ownerNode(t, nil)
	dir := n.serverDir(sftpSrvA)

	big := make([]byte, 5<<20+123)
	rand.Read(big)
	putFile(t, c, "/world.bin", big)
	if got, _ := os.ReadFile(filepath.Join(dir, "world.bin")); !bytes.Equal(got, big) {
		t.Fatalf("uploaded file differs on disk (%d bytes)", len(got))
	}
	if fi, _ := os.Stat(filepath.Join(dir, "world.bin")); fi.Mode().Perm() != 0o644 {
		t.Fatalf("new file mode %v", fi.Mode())
	}
	if got, err := getFile(c, "/world.bin"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("download: %v (%d bytes)", err, len(got))
	}
	// Overwrite (truncate) a file that exists.
	putFile(t, c, "world.bin", []byte("small"))
	if got, _ := os.ReadFile(filepath.Join(dir, "world.bin")); string(got) != "small" {
		t.Fatalf("overwrite: %q", got)
	}

	if err := c.Mkdir("/plugins"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "plugins")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mkdir on disk: %v %v", fi, err)
	}
	if err := c.MkdirAll("/a/b/c"); err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir("/plugins"); err == nil {
		t.Fatal("mkdir of an existing directory succeeded")
	}
	if err := c.Rename("/world.bin", "/plugins/world.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "world.bin")); !os.IsNotExist(err) {
		t.Fatal("rename left the source")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "plugins/world.txt")); string(got) != "small" {
		t.Fatalf("rename target %q", got)
	}
	putFile(t, c, "/taken", []byte("x"))
	if err := c.Rename("/taken", "/plugins/world.txt"); err == nil {
		t.Fatal("rename over an existing file succeeded")
	}

	// setstat: permission bits only (setuid dropped), times, size.
	if err := c.Chmod("/plugins/world.txt", 0o4755); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "plugins/world.txt")); fi.Mode() != 0o755 {
		t.Fatalf("chmod gave %v", fi.Mode())
	}
	if err := c.Chmod("/plugins/world.txt", 0); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "plugins/world.txt")); fi.Mode() != 0o644 {
		t.Fatalf("chmod 0 gave %v, want 0644", fi.Mode())
	}
	if err := c.Chmod("/plugins", 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "plugins")); fi.Mode().Perm() != 0o755 {
		t.Fatalf("chmod of a directory to 0600 gave %v, want 0755", fi.Mode())
	}
	old := time.Date(2020, 5, 6, 7, 8, 9, 0, time.UTC)
	if err := c.Chtimes("/plugins/world.txt", old, old); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "plugins/world.txt")); !fi.ModTime().Equal(old) {
		t.Fatalf("mtime %v", fi.ModTime())
	}
	if err := c.Truncate("/plugins/world.txt", 2); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "plugins/world.txt")); string(got) != "sm" {
		t.Fatalf("truncate: %q", got)
	}

	// Listing and stat.
	entries, err := c.ReadDir("/plugins")
	if err != nil || len(entries) != 1 || entries[0].Name() != "world.txt" || entries[0].Size() != 2 {
		t.Fatalf("list: %v %v", entries, err)
	}
	if fi, err := c.Stat("/a/b"); err != nil || !fi.IsDir() {
		t.Fatalf("stat: %v %v", fi, err)
	}

	// Remove refuses a directory; rmdir removes a whole tree.
	if err := c.Remove("/taken"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "taken")); !os.IsNotExist(err) {
		t.Fatal("remove left the file")
	}
	putFile(t, c, "/a/b/c/deep.txt", []byte("deep"))
	if err := c.RemoveDirectory("/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Fatal("rmdir left the directory")
	}
	if err := c.RemoveDirectory("/"); fxCode(err) != 3 {
		t.Fatalf("rmdir of the root: %v", err)
	}
	if err := c.RemoveDirectory("/plugins/world.txt"); err == nil {
		t.Fatal("rmdir of a file succeeded")
	}

	// A symbolic link inside the root works, and is stored relative.
	if err := c.Symlink("/plugins/world.txt", "/plugins/link"); err != nil {
		t.Fatal(err)
	}
	if target, _ := os.Readlink(filepath.Join(dir, "plugins/link")); target != "world.txt" {
		t.Fatalf("stored link target %q", target)
	}
	if got, err := getFile(c, "/plugins/link"); err != nil || string(got) != "sm" {
		t.Fatalf("read through an in-root link: %q %v", got, err)
	}
	if err := c.Symlink("../../../etc/passwd", "/plugins/out"); fxCode(err) != 3 {
		t.Fatalf("link out of the root: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "plugins/out")); !os.IsNotExist(err) {
		t.Fatal("an escaping link was created")
	}
	if err := c.Link("/plugins/world.txt", "/hard"); err == nil {
		t.Fatal("hard link created")
	}

	// The session still works for a client that disconnects mid-upload.
	f, err := c.Create("/partial.bin")
	if err != nil {
		t.Fatal(err)
	}
	f.Write(big[:1<<20])
	c.ssh.Close()
	c2 := n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
	if _, err := c2.Stat("/plugins"); err != nil {
		t.Fatalf("after a client vanished mid-upload: %v", err)
	}
}

// Every permission allows exactly its operations; without it they are
// SSH_FX_PERMISSION_DENIED.
func TestSFTPPermissions(t *testing.T) {
	t.Parallel()
	n := startSFTPNode(t, nil, sftpServerDef(sftpSrvA, 0, nil))
	dir := n.serverDir(sftpSrvA)
	perms := []string{"file.read", "file.read-content", "file.create", "file.update", "file.delete"}
	var users []devpanel.SFTPUser
	for _, p := range append(perms, "") {
		users = append(users, devpanel.SFTPUser{Username: "u" + p, Password: sftpPass, Server: sftpSrvA, User: sftpOther, Permissions: []string{p}})
	}
	n.Panel.SetSFTPUsers(users...)
	sessions := map[string]*sftpSession{}
	for _, p := range append(perms, "") {
		sessions[p] = n.sftpOpen(t, sftpLogin("u"+p, sftpSrvA), ssh.Password(sftpPass))
	}
	reset := func() {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
		writeFiles(t, dir, map[string]string{"f.txt": "content", "d/in.txt": "x"})
	}
	ops := []struct {
		name, perm string
		do         func(c *sftpSession) error
	}{
		{"list", "file.read", func(c *sftpSession) error { _, err := c.ReadDir("/d"); return err }},
		{"stat", "file.read", func(c *sftpSession) error { _, err := c.Stat("/f.txt"); return err }},
		{"download", "file.read-content", func(c *sftpSession) error { _, err := getFile(c, "/f.txt"); return err }},
		{"upload new", "file.create", func(c *sftpSession) error {
			f, err := c.Create("/new.txt")
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"mkdir", "file.create", func(c *sftpSession) error { return c.Mkdir("/nd") }},
		{"symlink", "file.create", func(c *sftpSession) error { return c.Symlink("f.txt", "/ln") }},
		{"overwrite", "file.update", func(c *sftpSession) error {
			f, err := c.Create("/f.txt")
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"chmod", "file.update", func(c *sftpSession) error { return c.Chmod("/f.txt", 0o600) }},
		{"rename", "file.update", func(c *sftpSession) error { return c.Rename("/f.txt", "/g.txt") }},
		{"remove", "file.delete", func(c *sftpSession) error { return c.Remove("/f.txt") }},
		{"rmdir", "file.delete", func(c *sftpSession) error { return c.RemoveDirectory("/d") }},
	}
	for _, op := range ops {
		for _, p := range append(perms, "") {
			reset()
			err := op.do(sessions[p])
			if p == op.perm && err != nil {
				t.Errorf("%s with %s: %v", op.name, p, err)
			}
			if p != op.perm && fxCode(err) != 3 {
				t.Errorf("%s with %q: %v, want permission denied", op.name, p, err)
			}
		}
	}
	// Nothing was created by the refused "upload new".
	reset()
	sessions["file.read"].Create("/nope.txt")
	if _, err := os.Stat(filepath.Join(dir, "nope.txt")); !os.IsNotExist(err) {
		t.Fatal("a refused create left a file")
	}
}

// read_only refuses every change and still serves reads.
func TestSFTPReadOnly(t *testing.T) {
	t.Parallel()
	n, c := ownerNode(t, func(c *config.Config) { c.System.SFTP.ReadOnly = true })
	dir := n.serverDir(sftpSrvA)
	writeFiles(t, dir, map[string]string{"f.txt": "content", "d/in.txt": "x"})
	if got, err := getFile(c, "/f.txt"); err != nil || string(got) != "content" {
		t.Fatalf("read: %q %v", got, err)
	}
	for name, err := range map[string]error{
		"create": func() error { _, err := c.Create("/new"); return err }(),
		"mkdir":  c.Mkdir("/nd"), "rename": c.Rename("/f.txt", "/g"), "remove": c.Remove("/f.txt"),
		"rmdir": c.RemoveDirectory("/d"), "chmod": c.Chmod("/f.txt", 0o600), "symlink": c.Symlink("f.txt", "/l"),
	} {
		if fxCode(err) != 8 {
			t.Errorf("%s on a read-only server: %v, want op unsupported", name, err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(got) != "content" {
		t.Fatal("a read-only server's file changed")
	}
}

// The egg's denylist: denied names cannot be read, written, renamed either
// way, removed or chmodded; a directory holding one is not removed.
func TestSFTPDenylist(t *testing.T) {
	t.Parallel()
	n, c := ownerNode(t, nil, sftpServerDef(sftpSrvA, 0, []string{"secret.key", "locked/"}))
	dir := n.serverDir(sftpSrvA)
	writeFiles(t, dir, map[string]string{"secret.key": "s", "sub/secret.key": "s2", "locked/x": "l", "ok.txt": "ok"})
	for name, err := range map[string]error{
		"read":          func() error { _, err := getFile(c, "/secret.key"); return err }(),
		"read nested":   func() error { _, err := getFile(c, "/sub/secret.key"); return err }(),
		"read in dir":   func() error { _, err := getFile(c, "/locked/x"); return err }(),
		"overwrite":     func() error { _, err := c.Create("/secret.key"); return err }(),
		"create":        func() error { _, err := c.Create("/locked/new"); return err }(),
		"rename from":   c.Rename("/secret.key", "/free.key"),
		"rename to":     c.Rename("/ok.txt", "/sub/secret.key"),
		"remove":        c.Remove("/secret.key"),
		"chmod":         c.Chmod("/secret.key", 0o777),
		"rmdir holding": c.RemoveDirectory("/sub"),
		"rmdir denied":  c.RemoveDirectory("/locked"),
		"mkdir":         c.Mkdir("/locked/d"),
	} {
		if fxCode(err) != 3 {
			t.Errorf("%s of a denylisted name: %v, want permission denied", name, err)
		}
	}
	for _, p := range []string{"secret.key", "sub/secret.key", "locked/x"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "secret.key")); fi.Mode().Perm() == 0o777 {
		t.Error("a denylisted file was chmodded")
	}
	// Metadata stays visible, as in the file manager.
	if _, err := c.Stat("/secret.key"); err != nil {
		t.Errorf("stat of a denylisted name: %v", err)
	}
}

// The disk limit holds while an upload runs: the write that would cross
// it fails with SSH_FX_QUOTA_EXCEEDED and nothing beyond the limit is on disk.
func TestSFTPQuotaExceededMidUpload(t *testing.T) {
	t.Parallel()
	n, c := ownerNode(t, nil, sftpServerDef(sftpSrvA, 1, nil))
	dir := n.serverDir(sftpSrvA)
	data := make([]byte, 3<<20)
	f, err := c.Create("/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	_, werr := f.Write(data)
	f.Close()
	if fxCode(werr) != 15 {
		t.Fatalf("upload past the limit: %v, want Quota Exceeded (15)", werr)
	}
	fi, err := os.Stat(filepath.Join(dir, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 1<<20 {
		t.Fatalf("%d bytes on disk with a 1 MiB limit", fi.Size())
	}
	// Below the limit after removing it, a small upload works again.
	if err := c.Remove("/big.bin"); err != nil {
		t.Fatal(err)
	}
	putFile(t, c, "/small.bin", data[:100<<10])
}

// A large directory is listed whole, a page at a time.
func TestSFTPLargeDirectoryListing(t *testing.T) {
	t.Parallel()
	n, c := ownerNode(t, nil)
	dir := filepath.Join(n.serverDir(sftpSrvA), "many")
	os.MkdirAll(dir, 0o755)
	const count = 20000
	for i := range count {
		f, err := os.Create(filepath.Join(dir, "f"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	entries, err := c.ReadDir("/many")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		seen[e.Name()] = true
	}
	if len(entries) != count || len(seen) != count {
		t.Fatalf("%d entries (%d distinct), want %d", len(entries), len(seen), count)
	}
}
