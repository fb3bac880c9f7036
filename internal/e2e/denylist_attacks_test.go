package e2e

import (
	"archive/zip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/devpanel"
)

// The denied file of the denylist attacks, and what it holds.
const (
	licenseRel  = "config/license.key"
	licenseData = "LICENSE-KEY-THE-OPERATOR-PUT-HERE"
	deniedMsg   = "This file cannot be modified: present in egg denylist."
)

// denylistNode is filesNode with config/license.key, any token.txt and
// vault/license.key denied, the tree the attacks walk around them, and an
// SFTP session of the server's owner.
func denylistNode(t *testing.T) (*node, *sftpSession) {
	t.Helper()
	n := filesNode(t, 100, func(s *devpanel.Server) {
		s.Settings["egg"] = map[string]any{"id": "1", "file_denylist": []string{licenseRel, "**/token.txt", "vault/license.key"}}
	})
	mustWrite(t, n.fpath(licenseRel), licenseData, 0o644)
	mustWrite(t, n.fpath("config/server.cfg"), "motd=hi", 0o644)
	mustWrite(t, n.fpath("deep/a/b/token.txt"), licenseData, 0o644)
	mustWrite(t, n.fpath("staging/license.key"), "user content", 0o644)
	mustWrite(t, n.fpath("free/ok.txt"), "ok", 0o644)
	for link, target := range map[string]string{"alias": "config", "here": "."} {
		if err := os.Symlink(target, n.fpath(link)); err != nil {
			t.Fatal(err)
		}
	}
	n.Panel.SetSFTPUsers(devpanel.SFTPUser{Username: "alice", Password: sftpPass, Server: filesServer, User: sftpOwner, Permissions: []string{"*"}})
	return n, n.sftpOpen(t, sftpLogin("alice", filesServer), ssh.Password(sftpPass))
}

// assertLicenseIntact checks the denied file where the operator put it,
// with its content and mode, and its directory's mode.
func (n *node) assertLicenseIntact(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(n.fpath(licenseRel))
	if err != nil || string(b) != licenseData {
		t.Fatalf("the denied file is gone or changed: %q, %v", b, err)
	}
	if fi, err := os.Stat(n.fpath("config")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the denied file's directory changed: %v, %v", fi, err)
	}
}

// assertNotServed reads name through the file manager and SFTP: neither
// may give the denied content.
func (n *node) assertNotServed(t *testing.T, c *sftpSession, name string) {
	t.Helper()
	res, body := n.files("GET", "contents?file="+q(name), nil)
	if res.StatusCode == 200 || strings.Contains(string(body), licenseData) {
		t.Errorf("file manager served %s: %d %q", name, res.StatusCode, body)
	}
	if b, err := getFile(c, name); err == nil || strings.Contains(string(b), licenseData) {
		t.Errorf("SFTP served %s: %q, %v", name, b, err)
	}
}

// A directory holding a denied file cannot be renamed, moved, deleted or
// chmodded, on the file manager and over SFTP, under its own name or
// through an in-root link; a directory cannot be moved onto a denied
// name; and the denied file is then never served under another name.
func TestDenylistAncestors(t *testing.T) {
	t.Parallel()
	n, c := denylistNode(t)
	httpDenied := func(what, method, route string, body any) {
		t.Helper()
		res, b := n.files(method, route, body)
		if res.StatusCode != 403 {
			t.Errorf("%s: status %d, want 403: %s", what, res.StatusCode, b)
			return
		}
		var e struct{ Error string }
		_ = json.Unmarshal(b, &e)
		if e.Error != deniedMsg {
			t.Errorf("%s: error %q, want %q", what, e.Error, deniedMsg)
		}
	}
	rename := func(from, to string) map[string]any {
		return map[string]any{"root": "/", "files": []map[string]string{{"from": from, "to": to}}}
	}
	// The direct case (control): the denied file itself.
	httpDenied("contents of the denied file", "GET", "contents?file="+q(licenseRel), nil)
	httpDenied("rename of the denied file", "PUT", "rename", rename(licenseRel, "x.key"))

	// The file manager.
	httpDenied("rename config", "PUT", "rename", rename("config", "moved"))
	n.assertNotServed(t, c, "moved/license.key")
	httpDenied("move config down", "PUT", "rename", rename("config", "free/config"))
	n.assertNotServed(t, c, "free/config/license.key")
	httpDenied("rename config through a link", "PUT", "rename", rename("here/config", "moved2"))
	n.assertNotServed(t, c, "moved2/license.key")
	httpDenied("rename with a nested pattern", "PUT", "rename", rename("deep", "shallow"))
	n.assertNotServed(t, c, "shallow/a/b/token.txt")
	httpDenied("rename onto a denied name", "PUT", "rename", rename("staging", "vault"))
	httpDenied("delete config", "POST", "delete", map[string]any{"root": "/", "files": []string{"config"}})
	httpDenied("delete config through a link", "POST", "delete", map[string]any{"root": "/here", "files": []string{"config"}})
	httpDenied("delete a grandparent", "POST", "delete", map[string]any{"root": "/", "files": []string{"deep/a"}})
	httpDenied("chmod config", "POST", "chmod", map[string]any{"root": "/", "files": []map[string]string{{"file": "config", "mode": "000"}}})
	httpDenied("chmod config through a link", "POST", "chmod", map[string]any{"root": "/here", "files": []map[string]string{{"file": "config", "mode": "000"}}})
	httpDenied("copy of the denied file", "POST", "copy", map[string]string{"location": licenseRel})

	// SFTP: permission denied (3) for the denied file and the same moves.
	for what, err := range map[string]error{
		"read of the denied file":    func() error { _, err := getFile(c, "/"+licenseRel); return err }(),
		"rename of the denied file":  c.Rename("/"+licenseRel, "/x.key"),
		"rename config":              c.Rename("/config", "/moved"),
		"posix-rename config":        c.PosixRename("/config", "/moved"),
		"rename config through link": c.Rename("/here/config", "/moved"),
		"rename a nested pattern":    c.Rename("/deep/a", "/shallow"),
		"rename onto a denied name":  c.Rename("/staging", "/vault"),
		"rmdir config":               c.RemoveDirectory("/config"),
		"chmod config":               c.Chmod("/config", 0o700),
		"chmod config through link":  c.Chmod("/here/config", 0o700),
	} {
		if fxCode(err) != 3 {
			t.Errorf("SFTP %s: %v, want permission denied", what, err)
		}
	}
	n.assertNotServed(t, c, "moved/license.key")
	n.assertNotServed(t, c, "shallow/b/token.txt")
	if _, err := os.Lstat(n.fpath("vault")); err == nil {
		t.Error("a directory was moved onto a denied name")
	}
	if b, _ := os.ReadFile(n.fpath("deep/a/b/token.txt")); string(b) != licenseData {
		t.Error("the nested denied file moved")
	}
	n.assertLicenseIntact(t)

	// Controls: what holds no denied file still moves, on both faces, and
	// so do the denied file's siblings.
	res, body := n.files("PUT", "rename", rename("free", "free2"))
	wantStatus(t, "rename free", res, body, 204)
	res, body = n.files("PUT", "rename", rename("config/server.cfg", "config/server2.cfg"))
	wantStatus(t, "rename a sibling", res, body, 204)
	if err := c.Rename("/free2", "/free3"); err != nil {
		t.Errorf("SFTP rename of a free directory: %v", err)
	}
	if err := c.Chmod("/free3", 0o750); err != nil {
		t.Errorf("SFTP chmod of a free directory: %v", err)
	}
	res, body = n.files("POST", "delete", map[string]any{"root": "/", "files": []string{"free3"}})
	wantStatus(t, "delete free", res, body, 204)
	if _, err := os.Lstat(n.fpath("free3")); err == nil {
		t.Error("free3 was not deleted")
	}
	n.assertLicenseIntact(t)
	n.assertAnswersEveryFace(t, filesServer)
}

// Compress of the denied file's directory, of the root and of the
// directory reached through an in-root link, as tar.gz and zip: each
// archive is made, holds the denied file's siblings, and never the denied
// file.
func TestDenylistCompressLeavesDeniedOut(t *testing.T) {
	t.Parallel()
	n, _ := denylistNode(t)
	cases := []struct{ root, file, sibling string }{
		{"/", "config", "config/server.cfg"},
		{"/", ".", "config/server.cfg"},
		{"/config", ".", "server.cfg"},
		{"/here/config", ".", "server.cfg"},
		{"/", "deep", "deep/a/b/"},
	}
	for i, tc := range cases {
		for _, ext := range []string{"tar.gz", "zip"} {
			name := "pack" + strings.Repeat("x", i)
			res, body := n.files("POST", "compress", map[string]any{"root": tc.root, "files": []string{tc.file}, "name": name, "extension": ext})
			wantStatus(t, "compress "+tc.root+" "+tc.file+" "+ext, res, body, 200)
			var st stat
			_ = json.Unmarshal(body, &st)
			dir := strings.TrimPrefix(tc.root, "/")
			p := n.fpath(filepath.Join(dir, st.Name))
			var listing string
			if ext == "zip" {
				listing = zipListing(t, p)
			} else {
				listing = tarList(t, p)
			}
			if strings.Contains(listing, licenseData) || strings.Contains(listing, "token.txt") {
				t.Errorf("compress %s %s (%s) holds the denied file:\n%s", tc.root, tc.file, ext, listing)
			}
			if !strings.Contains(listing, tc.sibling) {
				t.Errorf("compress %s %s (%s) lacks %s (the control):\n%s", tc.root, tc.file, ext, tc.sibling, listing)
			}
			_ = os.Remove(p)
		}
	}
	n.assertLicenseIntact(t)
	n.assertAnswersEveryFace(t, filesServer)
}

// zipListing describes a zip as tarList does a tar.gz.
func zipListing(t *testing.T, p string) string {
	t.Helper()
	zr, err := zip.OpenReader(p)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var out []string
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		out = append(out, f.Name+":"+string(b))
	}
	return strings.Join(out, " ")
}
