package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	osexec "os/exec"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// pullNode is filesNode with remote downloads allowed to reach 127.0.0.1
// (where the test servers listen) when allowLoopback.
func pullNode(t *testing.T, diskMB int, allowLoopback, disabled bool) *node {
	t.Helper()
	s := exampleServer(filesServer)
	s.Settings["build"] = map[string]any{"memory_limit": 128, "disk_space": diskMB}
	s.Settings["egg"] = map[string]any{"id": "1", "file_denylist": []string{"*.secret"}}
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{s, exampleServer(siblingServer)}, mutate: func(c *config.Config) {
		c.API.RemoteDownload.AllowLoopback = allowLoopback
		c.API.DisableRemoteDownload = disabled
	}})
	return n
}

// origin is a local HTTP server: /file/<n> serves n bytes with a
// Content-Length, /chunked/<n> without, /named serves a
// Content-Disposition, /hold waits for release, /redirect/<k> redirects k
// times, /to?u= redirects to u, /status/<code> answers code.
type origin struct {
	*httptest.Server
	release chan struct{}
	hits    atomic.Int64
}

func newOrigin(t *testing.T) *origin {
	o := &origin{release: make(chan struct{})}
	mux := http.NewServeMux()
	body := func(n int) []byte { return []byte(strings.Repeat("0123456789", n/10+1)[:n]) }
	mux.HandleFunc("/file/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		_, _ = w.Write(body(n))
	})
	mux.HandleFunc("/chunked/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		b := body(n)
		for len(b) > 0 {
			k := min(len(b), 64<<10)
			_, _ = w.Write(b[:k])
			w.(http.Flusher).Flush()
			b = b[k:]
		}
	})
	mux.HandleFunc("/named", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Disposition", `attachment; filename="../../evil name.txt"`)
		_, _ = w.Write([]byte("named"))
	})
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "20")
		_, _ = w.Write([]byte("0123456789"))
		w.(http.Flusher).Flush()
		select {
		case <-o.release:
			_, _ = w.Write([]byte("0123456789"))
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/redirect/{k}", func(w http.ResponseWriter, r *http.Request) {
		k, _ := strconv.Atoi(r.PathValue("k"))
		if k == 0 {
			_, _ = w.Write([]byte("arrived"))
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/redirect/%d", k-1), http.StatusFound)
	})
	mux.HandleFunc("/to", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("u"), http.StatusFound)
	})
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		c, _ := strconv.Atoi(r.PathValue("code"))
		w.WriteHeader(c)
	})
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.hits.Add(1)
		mux.ServeHTTP(w, r)
	}))
	o.Start()
	t.Cleanup(func() {
		select {
		case <-o.release:
		default:
			close(o.release)
		}
		o.Close()
	})
	return o
}

func (n *node) pull(body map[string]any) (*http.Response, []byte) {
	n.t.Helper()
	return n.files("POST", "pull", body)
}

func (n *node) pulls() []map[string]any {
	n.t.Helper()
	res, body := n.files("GET", "pull", nil)
	if res.StatusCode != 200 {
		n.t.Fatalf("GET pull: %d %s", res.StatusCode, body)
	}
	var v struct{ Downloads []map[string]any }
	if err := json.Unmarshal(body, &v); err != nil {
		n.t.Fatal(err)
	}
	return v.Downloads
}

func (n *node) waitNoPulls() {
	n.t.Helper()
	wait.For(n.t, 20*time.Second, func() bool { return len(n.pulls()) == 0 }, "the downloads to finish")
}

func TestFilesPull(t *testing.T) {
	t.Parallel()
	n := pullNode(t, 100, true, false)
	o := newOrigin(t)

	// Foreground: 200 with the Stat of the file; the name is the URL's last segment.
	res, body := n.pull(map[string]any{"url": o.URL + "/file/12345", "root": "/dl", "foreground": true})
	wantStatus(t, "foreground", res, body, 200)
	var st stat
	_ = json.Unmarshal(body, &st)
	if st.Name != "12345" || st.Size != 12345 || !st.File || st.ModeBits != "644" {
		t.Fatalf("stat %+v", st)
	}
	if fi, err := os.Stat(n.fpath("dl/12345")); err != nil || fi.Size() != 12345 {
		t.Fatal("file not written", err)
	}

	// Background: 202 {identifier}; progress with the panel's capitalised keys; then the file.
	res, body = n.pull(map[string]any{"url": o.URL + "/hold", "directory": "/", "file_name": "held.bin"})
	wantStatus(t, "background", res, body, 202)
	var started struct{ Identifier string }
	_ = json.Unmarshal(body, &started)
	if len(started.Identifier) != 36 {
		t.Fatalf("identifier %s", body)
	}
	var list []map[string]any
	wait.Until(10*time.Second, func() bool {
		list = n.pulls()
		return len(list) == 1 && list[0]["Progress"].(float64) == 0.5
	})
	if len(list) != 1 || list[0]["Identifier"] != started.Identifier || list[0]["Progress"] != 0.5 {
		t.Fatalf("progress list %v", list)
	}
	if _, err := os.Stat(n.fpath("held.bin")); err == nil {
		t.Fatal("the file appeared before the download finished")
	}
	close(o.release)
	n.waitNoPulls()
	if readFile(t, n.fpath("held.bin")) != "01234567890123456789" {
		t.Fatal("held.bin")
	}
	res, body = n.files("GET", "pull", nil)
	if res.StatusCode != 200 || string(body) != "{\"downloads\":null}\n" {
		t.Fatalf("empty list: %s", body)
	}

	// use_header: the Content-Disposition name, reduced to a base name.
	res, body = n.pull(map[string]any{"url": o.URL + "/named", "root": "/h", "use_header": true, "foreground": true})
	wantStatus(t, "named", res, body, 200)
	if readFile(t, n.fpath("h/evil name.txt")) != "named" {
		t.Fatal("header name")
	}
	// Chunked answers (no Content-Length) are accepted.
	res, body = n.pull(map[string]any{"url": o.URL + "/chunked/100000", "root": "/", "file_name": "c.bin", "foreground": true})
	wantStatus(t, "chunked", res, body, 200)
	// Ten redirects are followed, eleven are not.
	res, body = n.pull(map[string]any{"url": o.URL + "/redirect/10", "root": "/", "file_name": "r10", "foreground": true})
	wantStatus(t, "10 redirects", res, body, 200)
	res, body = n.pull(map[string]any{"url": o.URL + "/redirect/11", "root": "/", "file_name": "r11", "foreground": true})
	wantStatus(t, "11 redirects", res, body, 400)

	// Errors.
	for _, u := range []string{"ftp://example.com/x", "not a url", "file:///etc/passwd", "http://user:pw@example.com/"} {
		res, body = n.pull(map[string]any{"url": u, "root": "/"})
		wantError(t, u, res, body, 400, "The URL provided is not valid: it must be an http or https URL.")
	}
	res, body = n.pull(map[string]any{"url": o.URL + "/status/404", "root": "/", "foreground": true})
	wantStatus(t, "404 origin", res, body, 400)
	res, body = n.pull(map[string]any{"url": o.URL + "/file/10", "root": "/", "file_name": "x.secret", "foreground": true})
	wantStatus(t, "denylisted", res, body, 403)
	res, body = n.pull(map[string]any{"url": o.URL + "/file/10"})
	wantStatus(t, "no root", res, body, 400)
	noTemp(t, n.dataDir(filesServer))
	assertNoPullTemp(t, n)
}

func assertNoPullTemp(t *testing.T, n *node) {
	t.Helper()
	out, _ := run("find", n.dataDir(filesServer), "-name", "*wharf-pull*")
	if strings.TrimSpace(out) != "" {
		t.Fatalf("temporary download files left: %s", out)
	}
}

func TestFilesPullCancelLimitAndDisk(t *testing.T) {
	t.Parallel()
	n := pullNode(t, 1, true, false)
	o := newOrigin(t)
	var ids []string
	for i := range 3 {
		res, body := n.pull(map[string]any{"url": o.URL + "/hold", "root": "/", "file_name": fmt.Sprintf("h%d", i)})
		wantStatus(t, "hold", res, body, 202)
		var v struct{ Identifier string }
		_ = json.Unmarshal(body, &v)
		ids = append(ids, v.Identifier)
	}
	res, body := n.pull(map[string]any{"url": o.URL + "/hold", "root": "/", "file_name": "h4"})
	wantError(t, "fourth", res, body, 400, "This server is already running the maximum of 3 remote downloads.")
	for _, id := range ids {
		res, body := n.files("DELETE", "pull/"+id, nil)
		wantStatus(t, "cancel", res, body, 204)
	}
	res, body = n.files("DELETE", "pull/not-a-download", nil)
	wantStatus(t, "cancel unknown", res, body, 204)
	n.waitNoPulls()
	// The cancelled goroutines remove their files.
	var entries []os.DirEntry
	if !wait.Until(5*time.Second, func() bool { entries, _ = os.ReadDir(n.dataDir(filesServer)); return len(entries) == 0 }) {
		t.Fatalf("cancelled downloads left files: %v", entries)
	}
	// Over the 1 MiB limit: refused from Content-Length, and stopped while
	// streaming when there is none; nothing is left.
	res, body = n.pull(map[string]any{"url": o.URL + "/file/2000000", "root": "/", "foreground": true})
	wantError(t, "too big", res, body, 400, "There is not enough disk space available to perform that action.")
	res, body = n.pull(map[string]any{"url": o.URL + "/chunked/2000000", "root": "/", "foreground": true})
	wantError(t, "too big chunked", res, body, 400, "There is not enough disk space available to perform that action.")
	if entries, _ := os.ReadDir(n.dataDir(filesServer)); len(entries) != 0 {
		t.Fatalf("files left: %v", entries)
	}
}

func TestFilesPullDisabled(t *testing.T) {
	t.Parallel()
	n := pullNode(t, 100, true, true)
	for _, c := range [][2]string{{"GET", "pull"}, {"POST", "pull"}, {"DELETE", "pull/x"}} {
		res, body := n.files(c[0], c[1], map[string]any{"url": "http://example.com/x", "root": "/"})
		wantError(t, c[0], res, body, 400, "This functionality is not currently enabled on this instance.")
	}
}

// attacks.md N1-N3: internal addresses are refused at dial time, whether
// literal, behind a name, or behind a redirect; nothing is written.
func TestFilesPullSSRF(t *testing.T) {
	t.Parallel()
	n := pullNode(t, 100, false, false)
	// A listener on every address, to see any connection that gets through.
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("internal")) }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	for _, host := range []string{"127.0.0.1", "127.0.0.2", "localhost", "[::1]", "0.0.0.0", "[::ffff:127.0.0.1]", "[::]",
		"10.0.0.1", "172.16.0.1", "192.168.0.1", "169.254.169.254", "100.64.0.1", "198.18.0.1", "[fe80::1]", "[fc00::1]", "224.0.0.1"} {
		res, body := n.pull(map[string]any{"url": "http://" + host + ":" + port + "/x", "root": "/", "file_name": "ssrf", "foreground": true})
		if res.StatusCode != 400 || !strings.Contains(string(body), "internal address") {
			t.Errorf("%s: %d %s", host, res.StatusCode, body)
		}
	}
	if c := conns.Load(); c != 0 {
		t.Fatalf("%d connections reached the internal listener", c)
	}
	if _, err := os.Stat(n.fpath("ssrf")); err == nil {
		t.Fatal("an internal answer was written")
	}

	// Redirects to loopback from an allowed origin (the node allows
	// 127.0.0.1 only): refused on the hop.
	m := pullNode(t, 100, true, false)
	o := newOrigin(t)
	for _, target := range []string{"http://127.0.0.2:" + port + "/x", "http://[::1]:" + port + "/x", "http://169.254.169.254/latest", "http://10.1.2.3:" + port + "/"} {
		res, body := m.request("POST", "/api/servers/"+filesServer+"/files/pull",
			map[string]any{"url": o.URL + "/to?u=" + q(target), "root": "/", "file_name": "redir", "foreground": true}, "")
		if res.StatusCode != 400 || !strings.Contains(string(body), "internal address") {
			t.Errorf("redirect to %s: %d %s", target, res.StatusCode, body)
		}
	}
	if c := conns.Load(); c != 0 {
		t.Fatalf("%d connections reached the internal listener through redirects", c)
	}
	// The target through links and ".." stays inside.
	_, check := attackSetup(t, m)
	for _, req := range []map[string]any{
		{"root": "/sib", "file_name": "x"}, {"root": "/dang", "file_name": "x"}, {"root": "/", "file_name": "../" + siblingServer + "/sibling.txt"},
		{"root": "../" + siblingServer, "file_name": "x"}, {"root": "/etc", "file_name": "passwd"}, {"root": "/", "file_name": "sib/sibling.txt"},
	} {
		req["url"], req["foreground"] = o.URL+"/file/5", true
		res, body := m.request("POST", "/api/servers/"+filesServer+"/files/pull", req, "")
		if res.StatusCode < 400 || res.StatusCode >= 500 {
			t.Errorf("%v: %d %s", req, res.StatusCode, body)
		}
	}
	check()
}

func run(name string, args ...string) (string, error) {
	out, err := osexec.Command(name, args...).CombinedOutput()
	return string(out), err
}
