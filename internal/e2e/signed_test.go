package e2e

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/tokens"
)

const signedServer = "3c5e7a9b-1d2f-4a6b-8c0d-2e4f6a8b0c1d"

func (n *node) signURL(claims map[string]any) string {
	n.t.Helper()
	if _, ok := claims["exp"]; !ok {
		claims["exp"] = time.Now().Add(10 * time.Minute).Unix()
	}
	if _, ok := claims["iat"]; !ok {
		claims["iat"] = time.Now().Unix()
	}
	tok, err := tokens.Sign([]byte(n.Token), claims)
	if err != nil {
		n.t.Fatal(err)
	}
	return tok
}

func (n *node) dataDir(server string) string {
	return filepath.Join(n.Config.System.Data, server)
}

func (n *node) get(path string) (*http.Response, []byte) {
	n.t.Helper()
	return n.request("GET", path, nil, "-")
}

func downloadClaims(file string) map[string]any {
	return map[string]any{"file_path": file, "server_uuid": signedServer, "unique_id": uuid.NewString()}
}

func signedNode(t *testing.T, mutate func(c *config.Config)) *node {
	s := exampleServer(signedServer)
	s.Settings["egg"] = map[string]any{"id": "1", "file_denylist": []string{"*.secret", "locked/"}}
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{s}, mutate: mutate})
	if err := os.WriteFile(filepath.Join(n.dataDir(signedServer), "hello.txt"), []byte("hello, world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

func assertJSONError(t *testing.T, res *http.Response, body []byte, want int) {
	t.Helper()
	if res.StatusCode != want {
		t.Fatalf("status %d, want %d: %s", res.StatusCode, want, body)
	}
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") || !bytes.Contains(body, []byte(`"error"`)) {
		t.Fatalf("not a JSON error: %s %q", res.Header.Get("Content-Type"), body)
	}
}

func TestDownloadFile(t *testing.T) {
	t.Parallel()
	n := signedNode(t, nil)
	tok := n.signURL(downloadClaims("/hello.txt"))
	res, body := n.get("/download/file?token=" + tok)
	if res.StatusCode != 200 || string(body) != "hello, world\n" {
		t.Fatalf("download: %d %q", res.StatusCode, body)
	}
	if got := res.Header.Get("Content-Disposition"); got != `attachment; filename="hello.txt"` {
		t.Errorf("Content-Disposition = %q", got)
	}
	if res.Header.Get("Content-Type") != "application/octet-stream" || res.Header.Get("Content-Length") != "13" {
		t.Errorf("headers = %v", res.Header)
	}
	// attacks.md A5/D-series: the same token twice → the second is refused.
	res, body = n.get("/download/file?token=" + tok)
	assertJSONError(t, res, body, 401)

	// Range requests.
	req, _ := http.NewRequest("GET", n.URL+"/download/file?token="+n.signURL(downloadClaims("hello.txt")), nil)
	req.Header.Set("Range", "bytes=7-11")
	rres, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rres.Body)
	rres.Body.Close()
	if rres.StatusCode != 206 || string(got) != "world" {
		t.Fatalf("range: %d %q", rres.StatusCode, got)
	}
}

func TestDownloadFileRefusals(t *testing.T) {
	t.Parallel()
	n := signedNode(t, nil)
	if err := os.Mkdir(filepath.Join(n.dataDir(signedServer), "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.dataDir(signedServer), "x.secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	noneTok := func(claims map[string]any) string {
		h := `{"alg":"none","typ":"JWT"}`
		c := fmt.Sprintf(`{"file_path":"hello.txt","server_uuid":%q,"unique_id":"x","exp":%d}`, signedServer, time.Now().Add(time.Hour).Unix())
		enc := func(s string) string { return strings.TrimRight(b64url(s), "=") }
		return enc(h) + "." + enc(c) + "."
	}
	otherKey, _ := tokens.Sign([]byte("not-the-node-token"), map[string]any{"file_path": "hello.txt", "server_uuid": signedServer, "unique_id": "y", "exp": time.Now().Add(time.Hour).Unix()})
	cases := []struct {
		name  string
		query string
		want  int
	}{
		{"missing token", "", 401},
		{"garbage", "?token=abc.def.ghi", 401},
		{"bad signature", "?token=" + otherKey, 401},
		{"alg none", "?token=" + noneTok(nil), 401},
		{"expired", "?token=" + n.signURL(map[string]any{"file_path": "hello.txt", "server_uuid": signedServer, "unique_id": uuid.NewString(), "exp": time.Now().Add(-time.Minute).Unix()}), 401},
		{"websocket token", "?token=" + n.signURL(map[string]any{"user_uuid": uuid.NewString(), "server_uuid": signedServer, "permissions": []string{"*"}, "jti": "j"}), 401},
		{"upload token", "?token=" + n.signURL(map[string]any{"user_uuid": uuid.NewString(), "server_uuid": signedServer, "unique_id": uuid.NewString()}), 401},
		{"unknown server", "?token=" + n.signURL(map[string]any{"file_path": "hello.txt", "server_uuid": uuid.NewString(), "unique_id": uuid.NewString()}), 404},
		{"missing file", "?token=" + n.signURL(downloadClaims("nope.txt")), 404},
		{"escape", "?token=" + n.signURL(downloadClaims("../../../../etc/passwd")), 404},
		{"directory", "?token=" + n.signURL(downloadClaims("dir")), 400},
		{"denylisted", "?token=" + n.signURL(downloadClaims("x.secret")), 403},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, body := n.get("/download/file" + tc.query)
			assertJSONError(t, res, body, tc.want)
		})
	}
}

func TestDownloadFileConcurrentUseOnlyOnce(t *testing.T) {
	t.Parallel()
	n := signedNode(t, nil)
	tok := n.signURL(downloadClaims("hello.txt"))
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := 0; i < 10; i++ {
		wg.Go(func() {
			res, err := http.Get(n.URL + "/download/file?token=" + tok)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			mu.Lock()
			codes[res.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[200] != 1 || codes[401] != 9 {
		t.Fatalf("status counts = %v, want exactly one 200", codes)
	}
}

// attacks.md A9: a file name cannot inject a header.
func TestDownloadFileNameHeaderInjection(t *testing.T) {
	t.Parallel()
	n := signedNode(t, nil)
	name := "a\";b\r\nX-Injected: y.txt"
	if err := os.WriteFile(filepath.Join(n.dataDir(signedServer), name), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, body := n.get("/download/file?token=" + n.signURL(downloadClaims(name)))
	if res.StatusCode != 200 || string(body) != "x" {
		t.Fatalf("%d %q", res.StatusCode, body)
	}
	if res.Header.Get("X-Injected") != "" {
		t.Fatal("a header was injected")
	}
	if cd := res.Header.Get("Content-Disposition"); !strings.HasPrefix(cd, `attachment; filename="a\";b__X-Injected: y.txt"`) {
		t.Fatalf("Content-Disposition = %q", cd)
	}
}

// The one-time id is durable: a daemon killed with SIGKILL right after the use
// refuses the same token after it restarts.
func TestOneTimeIDSurvivesKill9(t *testing.T) {
	t.Parallel()
	n := signedNode(t, nil)
	tok := n.signURL(downloadClaims("hello.txt"))
	if res, _ := n.get("/download/file?token=" + tok); res.StatusCode != 200 {
		t.Fatalf("first use: %d", res.StatusCode)
	}
	n.kill9()
	n.restart()
	res, body := n.get("/download/file?token=" + tok)
	assertJSONError(t, res, body, 401)
}

func (n *node) upload(query string, files map[string][]byte) (*http.Response, []byte) {
	n.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for name, data := range files {
		fw, err := mw.CreateFormFile("files", name)
		if err != nil {
			n.t.Fatal(err)
		}
		_, _ = fw.Write(data)
	}
	_ = mw.Close()
	res, err := http.Post(n.URL+"/upload/file"+query, mw.FormDataContentType(), &buf)
	if err != nil {
		n.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, body
}

func uploadClaims() map[string]any {
	return map[string]any{"server_uuid": signedServer, "user_uuid": uuid.NewString(), "unique_id": uuid.NewString()}
}

func TestUpload(t *testing.T) {
	t.Parallel()
	n := signedNode(t, func(c *config.Config) { c.API.UploadLimit = 1; c.System.ActivitySendInterval = 1 })
	dir := n.dataDir(signedServer)

	res, body := n.upload("?directory=/plugins/new&token="+n.signURL(uploadClaims()), map[string][]byte{"a.jar": []byte("AAAA"), "b.txt": []byte("BB")})
	if res.StatusCode != 200 {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	for name, want := range map[string]string{"plugins/new/a.jar": "AAAA", "plugins/new/b.txt": "BB"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Fatalf("%s: %q %v", name, got, err)
		}
		st, _ := os.Stat(filepath.Join(dir, name))
		if st.Mode().Perm() != 0o644 {
			t.Fatalf("%s mode %o, want 644", name, st.Mode().Perm())
		}
	}

	call, ok := n.Panel.WaitForCall("POST", "/activity", 15*time.Second)
	if !ok || !bytes.Contains(call.Body, []byte(`"server:file.uploaded"`)) || !bytes.Contains(call.Body, []byte(`"a.jar"`)) {
		t.Fatalf("no server:file.uploaded activity reached the panel: %s", call.Body)
	}

	// attacks.md D8: over the limit → 400 and no partial file.
	big := bytes.Repeat([]byte("x"), 1024*1024+1)
	res, body = n.upload("?directory=/&token="+n.signURL(uploadClaims()), map[string][]byte{"big.bin": big})
	assertJSONError(t, res, body, 400)
	if _, err := os.Stat(filepath.Join(dir, "big.bin")); !os.IsNotExist(err) {
		t.Fatal("a partial file was left behind")
	}
	assertNoTempFiles(t, dir)

	// Denylisted name → 403.
	res, body = n.upload("?directory=/&token="+n.signURL(uploadClaims()), map[string][]byte{"x.secret": []byte("s")})
	assertJSONError(t, res, body, 403)

	// A download token is not an upload token.
	res, body = n.upload("?directory=/&token="+n.signURL(downloadClaims("hello.txt")), map[string][]byte{"c.txt": []byte("c")})
	assertJSONError(t, res, body, 401)
}

// An upload to a suspended server is refused with 409 and writes nothing,
// as every other user change to its files is.
func TestUploadRefusedWhileSuspended(t *testing.T) {
	t.Parallel()
	n := signedNode(t, nil)
	n.Panel.UpdateSettings(signedServer, "suspended", true)
	res, body := n.request("POST", "/api/servers/"+signedServer+"/sync", nil, "")
	if res.StatusCode/100 != 2 {
		t.Fatalf("sync: %d %s", res.StatusCode, body)
	}
	res, body = n.upload("?directory=/&token="+n.signURL(uploadClaims()), map[string][]byte{"new.txt": []byte("n")})
	assertJSONError(t, res, body, 409)
	if _, err := os.Stat(filepath.Join(n.dataDir(signedServer), "new.txt")); !os.IsNotExist(err) {
		t.Fatal("an upload reached a suspended server's files")
	}
}

// attacks.md F3: uploading through a symlinked directory that points outside
// creates nothing outside.
func TestUploadThroughSymlinkOutside(t *testing.T) {
	t.Parallel()
	n := signedNode(t, nil)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(n.dataDir(signedServer), "escape")); err != nil {
		t.Fatal(err)
	}
	res, body := n.upload("?directory=/escape&token="+n.signURL(uploadClaims()), map[string][]byte{"pwned.txt": []byte("x")})
	if res.StatusCode == 200 {
		t.Fatalf("upload through an outside link succeeded: %s", body)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 0 {
		t.Fatalf("files were created outside the server directory: %v", entries)
	}
}

func assertNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.Contains(filepath.Base(p), ".tmp") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

func b64url(s string) string {
	return strings.NewReplacer("+", "-", "/", "_").Replace(base64.StdEncoding.EncodeToString([]byte(s)))
}

func TestDownloadBackup(t *testing.T) {
	t.Parallel()
	other := uuid.NewString()
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{gameServer(backupServer), exampleServer(other)}})
	writeFiles(t, n.serverDir(backupServer), map[string]string{"world/level.dat": "level"})
	id := newBackupID()
	st := n.backup(id, "local", "")
	if !st.Successful {
		t.Fatalf("backup failed: %+v", st)
	}
	claims := func(server, backup string) map[string]any {
		return map[string]any{"server_uuid": server, "backup_uuid": backup, "unique_id": uuid.NewString()}
	}
	tok := n.signURL(claims(backupServer, id))
	res, body := n.get("/download/backup?token=" + tok)
	if res.StatusCode != 200 {
		t.Fatalf("download: %d %s", res.StatusCode, body)
	}
	if got := res.Header.Get("Content-Disposition"); got != `attachment; filename="backup-`+id+`.tar.gz"` {
		t.Errorf("Content-Disposition = %q", got)
	}
	if res.Header.Get("Content-Type") != "application/octet-stream" || res.Header.Get("Content-Length") != fmt.Sprint(len(body)) {
		t.Errorf("headers = %v (body %d bytes)", res.Header, len(body))
	}
	if sum := fmt.Sprintf("%x", sha1.Sum(body)); sum != st.Checksum || int64(len(body)) != st.Size {
		t.Fatalf("downloaded %d bytes sha1 %s, the panel was told %d bytes sha1 %s", len(body), sum, st.Size, st.Checksum)
	}
	res, body = n.get("/download/backup?token=" + tok)
	assertJSONError(t, res, body, 401)

	for name, tc := range map[string]struct {
		claims map[string]any
		want   int
	}{
		"another server's backup": {claims(other, id), 404},
		"missing backup":          {claims(backupServer, newBackupID()), 404},
		"file-download token":     {map[string]any{"file_path": "x", "server_uuid": backupServer, "unique_id": uuid.NewString()}, 401},
	} {
		t.Run(name, func(t *testing.T) {
			res, body := n.get("/download/backup?token=" + n.signURL(tc.claims))
			assertJSONError(t, res, body, tc.want)
		})
	}
}
