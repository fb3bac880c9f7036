package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// deepPath is n components "d/d/…/" followed by last.
func deepPath(n int, last string) string { return strings.Repeat("d/", n) + last }

// errorText is the "error" of a JSON error body.
func errorText(body []byte) string {
	var e struct{ Error string }
	_ = json.Unmarshal(body, &e)
	return e.Error
}

// TestFilesPathAttacks: a path of 4,000 components (about 8 KB) sent to
// create-directory, write, rename, copy, decompress (as an archive entry),
// SFTP mkdir and SFTP open is refused with a 400 (an SFTP failure) that
// names the limit, without walking the tree; a 300-byte component is a 400
// (it was a 500) on write, contents, create-directory and rename. The node
// answers every face after. Control: a 200-component path works on
// create-directory and write.
func TestFilesPathAttacks(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	n.Panel.SetSFTPUsers(devpanel.SFTPUser{Username: "alice", Password: sftpPass, Server: filesServer, User: sftpOwner, Permissions: []string{"*"}})
	c := n.sftpOpen(t, sftpLogin("alice", filesServer), ssh.Password(sftpPass))
	mustWrite(t, n.fpath("own.txt"), "own", 0o644)
	deep := deepPath(4000, "f.txt")
	const tooLong = "4096 bytes"

	refused := func(what string, status int, body []byte, limit string, took time.Duration) {
		t.Helper()
		if status != 400 || !strings.Contains(errorText(body), limit) {
			t.Errorf("%s: %d %s, want a 400 naming %q", what, status, body, limit)
		}
		t.Logf("%s: %d in %s", what, status, took)
	}
	timed := func(method, route string, body any) (int, []byte, time.Duration) {
		t.Helper()
		start := time.Now()
		res, b := n.files(method, route, body)
		return res.StatusCode, b, time.Since(start)
	}

	// The file manager.
	st, b, d := timed("POST", "create-directory", map[string]string{"name": deep, "path": "/"})
	refused("create-directory of 4,000 levels", st, b, tooLong, d)
	st, b, d = timed("POST", "write?file="+q("/"+deep), "x")
	refused("write of 4,000 levels", st, b, tooLong, d)
	st, b, d = timed("PUT", "rename", map[string]any{"root": "/", "files": []map[string]string{{"from": "own.txt", "to": deep}}})
	refused("rename to 4,000 levels", st, b, tooLong, d)
	st, b, d = timed("POST", "copy", map[string]string{"location": "/" + deep})
	refused("copy of 4,000 levels", st, b, tooLong, d)

	// An archive entry of 4,000 levels: refused (or skipped), never a crash
	// or a 500, and nothing of it created.
	mustWrite(t, n.fpath("deep.tar.gz"), string(gzipBytes(makeTar(t, []tarEntry{
		{name: deep, body: "deep"},
		{name: "ok.txt", body: "ok"},
	}))), 0o644)
	st, b, d = timed("POST", "decompress", map[string]string{"root": "/", "file": "deep.tar.gz"})
	t.Logf("decompress of a 4,000-level entry: %d %s in %s", st, b, d)
	if st != 204 && (st != 400 || !strings.Contains(errorText(b), tooLong)) {
		t.Errorf("decompress of a 4,000-level entry: %d %s, want 204 (skipped) or a 400 naming %q", st, b, tooLong)
	}
	if _, err := os.Lstat(n.fpath("d")); !os.IsNotExist(err) {
		t.Errorf("the refused names created a tree: %v", err)
	}

	// SFTP.
	start := time.Now()
	err := c.Mkdir("/" + deep)
	t.Logf("SFTP mkdir of 4,000 levels: %v in %s", err, time.Since(start))
	if err == nil || fxCode(err) != 4 || !strings.Contains(err.Error(), tooLong) {
		t.Errorf("SFTP mkdir of 4,000 levels: %v, want a failure naming %q", err, tooLong)
	}
	start = time.Now()
	f, err := c.Create("/" + deep)
	t.Logf("SFTP open of 4,000 levels: %v in %s", err, time.Since(start))
	if err == nil {
		f.Close()
	}
	if err == nil || fxCode(err) != 4 || !strings.Contains(err.Error(), tooLong) {
		t.Errorf("SFTP open of 4,000 levels: %v, want a failure naming %q", err, tooLong)
	}
	err = c.Mkdir("/" + deepPath(300, "x"))
	if err == nil || fxCode(err) != 4 || !strings.Contains(err.Error(), "256 directories") {
		t.Errorf("SFTP mkdir of 300 levels: %v, want a failure naming 256 directories", err)
	}
	if _, err := os.Lstat(n.fpath("d")); !os.IsNotExist(err) {
		t.Errorf("the refused names created a tree: %v", err)
	}

	// One component of 300 bytes: the kernel's ENAMETOOLONG was a 500.
	long := strings.Repeat("n", 300)
	const nameMax = "255 bytes"
	st, b, d = timed("POST", "write?file="+q("/"+long), "x")
	refused("write of a 300-byte name", st, b, nameMax, d)
	st, b, d = timed("GET", "contents?file="+q("/"+long), nil)
	refused("contents of a 300-byte name", st, b, nameMax, d)
	st, b, d = timed("POST", "create-directory", map[string]string{"name": long, "path": "/"})
	refused("create-directory of a 300-byte name", st, b, nameMax, d)
	st, b, d = timed("PUT", "rename", map[string]any{"root": "/", "files": []map[string]string{{"from": "own.txt", "to": long}}})
	refused("rename to a 300-byte name", st, b, nameMax, d)
	if _, err := os.Stat(n.fpath("own.txt")); err != nil {
		t.Errorf("own.txt after the refused rename: %v", err)
	}

	// Control: 200 levels work on both routes.
	ok := deepPath(199, "leaf")
	if res, body := n.files("POST", "create-directory", map[string]string{"name": ok, "path": "/"}); res.StatusCode != 204 {
		t.Fatalf("create-directory of 200 levels: %d %s", res.StatusCode, body)
	}
	if fi, err := os.Stat(n.fpath(filepath.FromSlash(ok))); err != nil || !fi.IsDir() {
		t.Fatalf("200 levels on disk: %v", err)
	}
	okFile := "e/" + deepPath(198, "f.txt")
	if res, body := n.files("POST", "write?file="+q("/"+okFile), "at the bottom"); res.StatusCode != 204 {
		t.Fatalf("write of 200 levels: %d %s", res.StatusCode, body)
	}
	if got, err := os.ReadFile(n.fpath(filepath.FromSlash(okFile))); err != nil || string(got) != "at the bottom" {
		t.Fatalf("200-level file on disk: %q %v", got, err)
	}

	n.assertAnswersEveryFace(t, filesServer)
}

// TestFilesCompressKeepsTreesDeeperThanTheLimit: the path limits are for
// names users send; a tree 300 levels deep that the game made (here on the
// host) is compressed whole, its deepest file and link included.
func TestFilesCompressKeepsTreesDeeperThanTheLimit(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	bottom := deepPath(300, "")
	dir := n.fpath(filepath.FromSlash(bottom))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "f.txt"), "bottom", 0o644)
	if err := os.Symlink("f.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	res, body := n.files("POST", "compress", map[string]any{"root": "/", "files": []string{"d"}, "name": "deep", "extension": "tar.gz"})
	wantStatus(t, "compress of a 300-level tree", res, body, 200)
	f, err := os.Open(n.fpath("deep.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hdrs := tree.Headers(t, f)
	if h := hdrs[bottom+"f.txt"]; h == nil || h.Size != int64(len("bottom")) {
		t.Errorf("the deepest file is not in the archive (%d entries)", len(hdrs))
	}
	if h := hdrs[bottom+"link"]; h == nil || h.Linkname != "f.txt" {
		t.Errorf("the deepest link is not in the archive")
	}
	n.assertAnswersEveryFace(t, filesServer)
}
