package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/devpanel"
)

const (
	filesServer   = "5a1b2c3d-4e5f-4a6b-9c7d-8e9f0a1b2c3d"
	siblingServer = "6b2c3d4e-5f6a-4b7c-8d9e-0f1a2b3c4d5e"
)

// filesNode runs a node with two servers: the one under test (disk limit
// diskMB, denylist "*.secret" and "locked/") and a sibling whose directory
// the attacks aim at.
func filesNode(t *testing.T, diskMB int, mutate func(s *devpanel.Server)) *node {
	t.Helper()
	s := exampleServer(filesServer)
	s.Settings["build"] = map[string]any{"memory_limit": 128, "disk_space": diskMB}
	s.Settings["egg"] = map[string]any{"id": "1", "file_denylist": []string{"*.secret", "locked/"}}
	if mutate != nil {
		mutate(&s)
	}
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{s, exampleServer(siblingServer)}})
	if err := os.WriteFile(filepath.Join(n.dataDir(siblingServer), "sibling.txt"), []byte("sibling data"), 0o600); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *node) fpath(rel string) string { return filepath.Join(n.dataDir(filesServer), rel) }

func (n *node) files(method, route string, body any) (*http.Response, []byte) {
	n.t.Helper()
	return n.request(method, "/api/servers/"+filesServer+"/files/"+route, body, "")
}

func q(v string) string { return url.QueryEscape(v) }

func mustWrite(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func wantStatus(t *testing.T, what string, res *http.Response, body []byte, want int) {
	t.Helper()
	if res.StatusCode != want {
		t.Fatalf("%s: status %d, want %d: %s", what, res.StatusCode, want, body)
	}
	if want >= 400 {
		assertJSONError(t, res, body, want)
	}
}

func wantError(t *testing.T, what string, res *http.Response, body []byte, want int, msg string) {
	t.Helper()
	wantStatus(t, what, res, body, want)
	var e struct{ Error string }
	_ = json.Unmarshal(body, &e)
	if e.Error != msg {
		t.Fatalf("%s: error %q, want %q", what, e.Error, msg)
	}
}

func noTemp(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil && strings.Contains(filepath.Base(p), "wharf-tmp") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

type stat struct {
	Name      string `json:"name"`
	Created   string `json:"created"`
	Modified  string `json:"modified"`
	Mode      string `json:"mode"`
	ModeBits  string `json:"mode_bits"`
	Size      int64  `json:"size"`
	Directory bool   `json:"directory"`
	File      bool   `json:"file"`
	Symlink   bool   `json:"symlink"`
	Mime      string `json:"mime"`
}

func TestFilesWriteContentsList(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	res, body := n.files("POST", "write?file="+q("/conf/server.properties"), "motd=hi\n")
	wantStatus(t, "write", res, body, 204)
	if b, _ := os.ReadFile(n.fpath("conf/server.properties")); string(b) != "motd=hi\n" {
		t.Fatalf("written %q", b)
	}
	if fi, _ := os.Stat(n.fpath("conf/server.properties")); fi.Mode().Perm() != 0o644 {
		t.Fatalf("new file mode %v", fi.Mode())
	}
	// An existing file keeps its mode; the empty body is allowed.
	_ = os.Chmod(n.fpath("conf/server.properties"), 0o600)
	res, body = n.files("POST", "write?file=conf/server.properties", "")
	wantStatus(t, "write empty", res, body, 204)
	if fi, _ := os.Stat(n.fpath("conf/server.properties")); fi.Mode().Perm() != 0o600 || fi.Size() != 0 {
		t.Fatalf("rewritten file: %v %d", fi.Mode(), fi.Size())
	}

	mustWrite(t, n.fpath("b.txt"), "hello, world\n", 0o644)
	res, body = n.files("GET", "contents?file=/b.txt", nil)
	wantStatus(t, "contents", res, body, 200)
	if string(body) != "hello, world\n" || res.Header.Get("Content-Length") != "13" ||
		res.Header.Get("X-Mime-Type") != "text/plain; charset=utf-8" || res.Header.Get("Content-Disposition") != "" {
		t.Fatalf("contents: %q %v", body, res.Header)
	}
	res, body = n.files("GET", "contents?file=b.txt&download=1", nil)
	if res.StatusCode != 200 || res.Header.Get("Content-Disposition") != `attachment; filename="b.txt"` ||
		res.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("download: %d %v %s", res.StatusCode, res.Header, body)
	}
	// attacks.md A9: the name cannot inject a header.
	evil := "a\";b\r\nX-Injected: y.txt"
	mustWrite(t, n.fpath(evil), "x", 0o644)
	res, _ = n.files("GET", "contents?download=1&file="+q(evil), nil)
	if res.StatusCode != 200 || res.Header.Get("X-Injected") != "" ||
		!strings.HasPrefix(res.Header.Get("Content-Disposition"), `attachment; filename="a\";b__X-Injected: y.txt"`) {
		t.Fatalf("header injection: %d %v", res.StatusCode, res.Header)
	}
	_ = os.Remove(n.fpath(evil))

	// The Stat object, field by field.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("data"))
	_ = zw.Close()
	mustWrite(t, n.fpath("z.gz"), gz.String(), 0o640)
	mustWrite(t, n.fpath("alpha/x"), "", 0o644)
	if err := os.Symlink("b.txt", n.fpath("link")); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	_ = os.Chtimes(n.fpath("b.txt"), mtime, mtime)
	res, body = n.files("GET", "list-directory?directory=/", nil)
	wantStatus(t, "list", res, body, 200)
	var list []stat
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	byName := map[string]stat{}
	for _, s := range list {
		names = append(names, s.Name)
		byName[s.Name] = s
	}
	if got := strings.Join(names, ","); got != "alpha,conf,b.txt,link,z.gz" {
		t.Fatalf("order %s", got)
	}
	b := byName["b.txt"]
	var st syscall.Stat_t
	_ = syscall.Lstat(n.fpath("b.txt"), &st)
	ctime := time.Unix(st.Ctim.Sec, 0).Format(time.RFC3339)
	if b.Modified != mtime.Local().Format(time.RFC3339) || b.Created != ctime || b.Mode != "-rw-r--r--" || b.ModeBits != "644" ||
		b.Size != 13 || b.Directory || !b.File || b.Symlink || b.Mime != "text/plain; charset=utf-8" {
		t.Fatalf("b.txt: %+v (ctime %s)", b, ctime)
	}
	if l := byName["link"]; !l.Symlink || l.Mode != "Lrwxrwxrwx" || l.ModeBits != "777" || l.Directory || !l.File || l.Mime != "application/octet-stream" {
		t.Fatalf("link: %+v", l)
	}
	if d := byName["alpha"]; !d.Directory || d.File || d.Symlink || d.Mode != "drwxr-xr-x" || d.ModeBits != "755" || d.Mime != "inode/directory" || d.Size != 4096 {
		t.Fatalf("alpha: %+v", d)
	}
	if z := byName["z.gz"]; z.Mime != "application/gzip" || z.Mode != "-rw-r-----" || z.ModeBits != "640" {
		t.Fatalf("z.gz: %+v", z)
	}
	// A listing through an in-root link to a directory works.
	_ = os.Symlink("alpha", n.fpath("alink"))
	res, body = n.files("GET", "list-directory?directory=alink", nil)
	if res.StatusCode != 200 || !strings.Contains(string(body), `"name":"x"`) {
		t.Fatalf("list via link: %d %s", res.StatusCode, body)
	}
}

func TestFilesReadErrors(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	mustWrite(t, n.fpath("dir/f.txt"), "x", 0o644)
	mustWrite(t, n.fpath("a.secret"), "s", 0o644)
	if err := syscall.Mkfifo(n.fpath("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, body := n.files("GET", "contents?file=missing.txt", nil)
	wantError(t, "missing", res, body, 404, "The requested file does not exist.")
	res, body = n.files("GET", "contents?file=dir", nil)
	wantError(t, "directory", res, body, 400, "Cannot perform that action: file is a directory.")
	res, body = n.files("GET", "contents?file=fifo", nil)
	wantError(t, "fifo", res, body, 400, "Cannot open files of this type.")
	res, body = n.files("GET", "contents?file=a.secret", nil)
	wantError(t, "denylisted", res, body, 403, "This file cannot be modified: present in egg denylist.")
	res, body = n.files("GET", "list-directory?directory=dir/f.txt", nil)
	wantStatus(t, "list a file", res, body, 400)
	res, body = n.files("GET", "list-directory?directory=nope", nil)
	wantStatus(t, "list missing", res, body, 404)
	res, body = n.request("GET", "/api/servers/"+uuidNotHere+"/files/list-directory?directory=/", nil, "")
	wantStatus(t, "unknown server", res, body, 404)
	res, body = n.request("GET", "/api/servers/"+filesServer+"/files/list-directory?directory=/", nil, "-")
	wantStatus(t, "no token", res, body, 401)
}

const uuidNotHere = "00000000-0000-4000-8000-000000000000"

func TestFilesWriteErrors(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 1, nil)
	mustWrite(t, n.fpath("dir/f.txt"), "x", 0o644)
	// No Content-Length (a chunked body).
	req, _ := http.NewRequest("POST", n.URL+"/api/servers/"+filesServer+"/files/write?file=c.txt", io.MultiReader(strings.NewReader("abc")))
	req.Header.Set("Authorization", "Bearer "+n.Token)
	req.ContentLength = -1
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	wantError(t, "chunked", res, body, 400, "Missing Content-Length")
	res, body = n.files("POST", "write?file=dir", "x")
	wantError(t, "on a dir", res, body, 400, "Cannot write file, name conflicts with an existing directory by the same name.")
	res, body = n.files("POST", "write?file=x.secret", "x")
	wantStatus(t, "denylisted", res, body, 403)
	res, body = n.files("POST", "write?file=locked/x.txt", "x")
	wantStatus(t, "denylisted dir", res, body, 403)
	// Over the 1 MiB limit: refused, and no file, whole or partial, is left.
	res, body = n.files("POST", "write?file=big.bin", bytes.Repeat([]byte("x"), 2<<20))
	wantError(t, "over quota", res, body, 400, "There is not enough disk space available to perform that action.")
	if _, err := os.Stat(n.fpath("big.bin")); !os.IsNotExist(err) {
		t.Fatalf("big.bin exists: %v", err)
	}
	noTemp(t, n.dataDir(filesServer))
	for _, p := range []string{"c.txt", "x.secret", "locked/x.txt"} {
		if _, err := os.Stat(n.fpath(p)); !os.IsNotExist(err) {
			t.Fatalf("%s was written", p)
		}
	}
}

func TestFilesRenameCopyMkdirDeleteChmod(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	mustWrite(t, n.fpath("a.txt"), "A", 0o640)
	mustWrite(t, n.fpath("b.txt"), "B", 0o644)
	mustWrite(t, n.fpath("x.tar.gz"), "T", 0o644)
	mustWrite(t, n.fpath("d/in.txt"), "I", 0o644)
	mustWrite(t, n.fpath("keep.secret"), "S", 0o644)

	// rename
	res, body := n.files("PUT", "rename", map[string]any{"root": "/", "files": []map[string]string{{"from": "a.txt", "to": "moved/a2.txt"}, {"from": "gone.txt", "to": "x.txt"}}})
	wantStatus(t, "rename", res, body, 204)
	if b, _ := os.ReadFile(n.fpath("moved/a2.txt")); string(b) != "A" {
		t.Fatal("rename did not move the file")
	}
	res, body = n.files("PUT", "rename", map[string]any{"root": "/", "files": []map[string]string{{"from": "b.txt", "to": "x.tar.gz"}}})
	wantError(t, "rename onto existing", res, body, 400, "Cannot move or rename file, destination already exists.")
	res, body = n.files("PUT", "rename", map[string]any{"root": "/", "files": []map[string]string{}})
	wantError(t, "rename none", res, body, 422, "No files to move or rename were provided.")
	res, body = n.files("PUT", "rename", map[string]any{"root": "/", "files": []map[string]string{{"from": "b.txt", "to": "b.secret"}}})
	wantStatus(t, "rename to denied", res, body, 403)
	res, body = n.files("PUT", "rename", map[string]any{"root": "/", "files": []map[string]string{{"from": "keep.secret", "to": "free.txt"}}})
	wantStatus(t, "rename from denied", res, body, 403)
	res, body = n.files("PUT", "rename", map[string]any{"root": "/d", "files": []map[string]string{{"from": "in.txt", "to": "in2.txt"}}})
	wantStatus(t, "rename in root", res, body, 204)
	if _, err := os.Stat(n.fpath("d/in2.txt")); err != nil {
		t.Fatal(err)
	}

	// copy
	for _, want := range []string{"b copy.txt", "b copy 1.txt", "b copy 2.txt"} {
		res, body = n.files("POST", "copy", map[string]string{"location": "/b.txt"})
		wantStatus(t, "copy", res, body, 204)
		if b, err := os.ReadFile(n.fpath(want)); err != nil || string(b) != "B" {
			t.Fatalf("copy %s: %v %q", want, err, b)
		}
	}
	res, body = n.files("POST", "copy", map[string]string{"location": "x.tar.gz"})
	wantStatus(t, "copy tar.gz", res, body, 204)
	if _, err := os.Stat(n.fpath("x copy.tar.gz")); err != nil {
		t.Fatal("x copy.tar.gz:", err)
	}
	res, body = n.files("POST", "copy", map[string]string{"location": "d"})
	wantError(t, "copy dir", res, body, 400, "Only regular files can be copied.")
	res, body = n.files("POST", "copy", map[string]string{"location": "nope.txt"})
	wantStatus(t, "copy missing", res, body, 404)
	res, body = n.files("POST", "copy", map[string]string{"location": "keep.secret"})
	wantStatus(t, "copy denied", res, body, 403)

	// create-directory
	res, body = n.files("POST", "create-directory", map[string]string{"name": "p/q", "path": "/d"})
	wantStatus(t, "mkdir", res, body, 204)
	if fi, err := os.Stat(n.fpath("d/p/q")); err != nil || !fi.IsDir() {
		t.Fatal("mkdir:", err)
	}
	res, body = n.files("POST", "create-directory", map[string]string{"name": "b.txt/sub", "path": "/"})
	wantError(t, "mkdir ENOTDIR", res, body, 400, "Part of the path being created is not a directory (ENOTDIR).")
	res, body = n.files("POST", "create-directory", map[string]string{"name": "locked", "path": "/"})
	wantStatus(t, "mkdir denied", res, body, 403)

	// chmod: every entry of a batch is applied (Wings applied only the last).
	res, body = n.files("POST", "chmod", map[string]any{"root": "/", "files": []map[string]string{
		{"file": "b.txt", "mode": "600"}, {"file": "b copy.txt", "mode": "604"}, {"file": "d", "mode": "700"}, {"file": "missing", "mode": "644"}}})
	wantStatus(t, "chmod", res, body, 204)
	for p, want := range map[string]os.FileMode{"b.txt": 0o600, "b copy.txt": 0o604, "d": 0o700} {
		if fi, _ := os.Stat(n.fpath(p)); fi.Mode().Perm() != want {
			t.Fatalf("%s mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
	res, body = n.files("POST", "chmod", map[string]any{"root": "/", "files": []map[string]string{{"file": "b.txt", "mode": "9x"}}})
	wantError(t, "chmod bad", res, body, 400, "Invalid file mode.")
	res, body = n.files("POST", "chmod", map[string]any{"root": "/", "files": []map[string]string{{"file": "b.txt", "mode": "4755"}}})
	wantStatus(t, "chmod setuid", res, body, 400)
	res, body = n.files("POST", "chmod", map[string]any{"root": "/", "files": []map[string]any{{"file": "b.txt", "mode": 755}}})
	wantStatus(t, "chmod number", res, body, 400)
	res, body = n.files("POST", "chmod", map[string]any{"root": "/", "files": []map[string]string{}})
	wantStatus(t, "chmod none", res, body, 422)
	res, body = n.files("POST", "chmod", map[string]any{"root": "/", "files": []map[string]string{{"file": "keep.secret", "mode": "777"}}})
	wantStatus(t, "chmod denied", res, body, 403)

	// delete
	res, body = n.files("POST", "delete", map[string]any{"root": "/", "files": []string{"b copy 1.txt", "d", "not-there"}})
	wantStatus(t, "delete", res, body, 204)
	for _, p := range []string{"b copy 1.txt", "d"} {
		if _, err := os.Lstat(n.fpath(p)); !os.IsNotExist(err) {
			t.Fatalf("%s not deleted", p)
		}
	}
	for _, root := range []string{"/", ".", "", "sub/.."} {
		res, body = n.files("POST", "delete", map[string]any{"root": "/", "files": []string{"b.txt", root}})
		wantError(t, "delete root "+root, res, body, 400, "The root directory of the server cannot be deleted.")
	}
	if _, err := os.Stat(n.fpath("b.txt")); err != nil {
		t.Fatal("a refused batch deleted something:", err)
	}
	res, body = n.files("POST", "delete", map[string]any{"root": "/", "files": []string{}})
	wantError(t, "delete none", res, body, 422, "No files were specified for deletion.")
	res, body = n.files("POST", "delete", map[string]any{"root": "/", "files": []string{"keep.secret"}})
	wantStatus(t, "delete denied", res, body, 403)
}

// Writes are refused with 409 on a suspended server; reads still work.
func TestFilesSuspendedRefusesWrites(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, func(s *devpanel.Server) { s.Settings["suspended"] = true })
	mustWrite(t, n.fpath("a.txt"), "A", 0o644)
	res, body := n.files("GET", "contents?file=a.txt", nil)
	wantStatus(t, "read", res, body, 200)
	calls := []struct {
		method, route string
		body          any
	}{
		{"POST", "write?file=b.txt", "x"},
		{"PUT", "rename", map[string]any{"files": []map[string]string{{"from": "a.txt", "to": "c.txt"}}}},
		{"POST", "copy", map[string]string{"location": "a.txt"}},
		{"POST", "create-directory", map[string]string{"name": "d", "path": "/"}},
		{"POST", "delete", map[string]any{"files": []string{"a.txt"}}},
		{"POST", "chmod", map[string]any{"files": []map[string]string{{"file": "a.txt", "mode": "600"}}}},
	}
	for _, c := range calls {
		res, body := n.files(c.method, c.route, c.body)
		wantStatus(t, c.route, res, body, 409)
	}
	if fi, err := os.Stat(n.fpath("a.txt")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatal("a suspended server's file changed")
	}
}

func TestFilesSearch(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	mustWrite(t, n.fpath("plugins/Essentials.jar"), "PK\x03\x04", 0o644)
	mustWrite(t, n.fpath("plugins/essentials/config.yml"), "a: 1", 0o644)
	mustWrite(t, n.fpath("node_modules/essentials-lib/index.js"), "x", 0o644)
	mustWrite(t, n.fpath("world/region/r.0.0.mca"), "x", 0o644)
	deep := "d"
	for range 12 {
		deep += "/d"
	}
	mustWrite(t, n.fpath(deep+"/essentials-deep.txt"), "x", 0o644)
	_ = os.Symlink("/etc", n.fpath("plugins/etc-essentials"))
	_ = os.Symlink("/etc", n.fpath("etc"))

	res, body := n.files("GET", "search?directory=/&pattern=ESSENTIAL", nil)
	wantStatus(t, "search", res, body, 200)
	var got []stat
	_ = json.Unmarshal(body, &got)
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	want := "plugins/Essentials.jar plugins/essentials plugins/etc-essentials"
	if strings.Join(names, " ") != want {
		t.Fatalf("search found %v, want %s", names, want)
	}
	res, body = n.files("GET", "search?directory=/plugins&pattern=*.yml", nil)
	wantStatus(t, "glob", res, body, 200)
	if !strings.Contains(string(body), `"name":"essentials/config.yml"`) || strings.Count(string(body), `"name"`) != 1 {
		t.Fatalf("glob: %s", body)
	}
	res, body = n.files("GET", "search?directory=/&pattern=ab", nil)
	wantError(t, "short", res, body, 400, "The search pattern must be at least 3 characters long.")
	res, body = n.files("GET", "search?directory=/nope&pattern=abc", nil)
	wantStatus(t, "missing dir", res, body, 404)
	for _, dir := range []string{"etc", "../" + siblingServer} {
		res, body = n.files("GET", "search?pattern=passwd&directory="+q(dir), nil)
		if res.StatusCode == 200 && strings.Contains(string(body), "passwd") || res.StatusCode >= 500 {
			t.Fatalf("search %s: %d %s", dir, res.StatusCode, body)
		}
	}
}
