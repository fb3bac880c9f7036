package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
)

// Two daemons sharing one fake panel, as two nodes of one deployment. Each
// node reaches the panel through its own view, which lists only the servers
// assigned to that node (as the real panel does) and tags the node's calls
// with the X-Test-Node header, so a test can tell who reported what.

const clusterTokenID, clusterToken = "e2etokenid", "e2e-node-token-7f3c9a1b5d"

type cluster struct {
	Panel  *devpanel.Panel
	Source *node
	Target *node
	assign map[*node]*assignment
}

type assignment struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (a *assignment) set(id string, on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids[id] = on
}

func (a *assignment) has(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[id]
}

// startCluster starts the panel with servers (assigned to the source) and
// two nodes; mutate (optional) changes each node's config by name.
func startCluster(t *testing.T, servers []devpanel.Server, mutate func(name string, c *config.Config)) *cluster {
	t.Helper()
	p := devpanel.New(clusterTokenID, clusterToken)
	for _, s := range servers {
		p.PutServer(s)
	}
	ps := httptest.NewServer(p.Handler())
	t.Cleanup(ps.Close)
	c := &cluster{Panel: p, assign: map[*node]*assignment{}}
	srcIDs := map[string]bool{}
	for _, s := range servers {
		srcIDs[s.UUID] = true
	}
	srcA, tgtA := &assignment{ids: srcIDs}, &assignment{ids: map[string]bool{}}
	c.Source = startClusterNode(t, "source", ps.URL, srcA, mutate)
	c.Target = startClusterNode(t, "target", ps.URL, tgtA, mutate)
	c.assign[c.Source], c.assign[c.Target] = srcA, tgtA
	return c
}

func startClusterNode(t *testing.T, name, panelURL string, a *assignment, mutate func(string, *config.Config)) *node {
	t.Helper()
	testimages.RequireDocker(t)
	c, cfgPath := clusterConfig(t, name, panelView(t, panelURL, name, a).URL, mutate)
	n := &node{
		t: t, URL: "http://127.0.0.1:" + strconv.Itoa(c.API.Port), Token: clusterToken, Config: c,
		CfgPath: cfgPath, log: &syncBuffer{},
	}
	t.Cleanup(n.stop)
	n.restart()
	return n
}

// clusterConfig writes the configuration of one node of a cluster.
func clusterConfig(tb testing.TB, name, remote string, mutate func(string, *config.Config)) (*config.Config, string) {
	tb.Helper()
	dir := tb.TempDir()
	c := config.Defaults()
	c.UUID = "6f1a2b3c-4d5e-4f60-8a71-92b3c4d5e6f1"
	if name != "source" {
		c.UUID = "6f1a2b3c-4d5e-4f60-8a71-92b3c4d5e6f2"
	}
	c.TokenID, c.Token = clusterTokenID, clusterToken
	c.Remote = remote
	if testimages.Podman() {
		usePodman(c) // never Docker's bridge (issue 37)
	}
	c.API.Host = "127.0.0.1"
	c.API.Port = freePort(tb)
	c.PlaceUnder(dir)
	c.System.Username = "root"
	// Each node's SFTP listener on its own port, not both on 2022.
	c.System.SFTP.BindAddress = "127.0.0.1"
	c.System.SFTP.BindPort = freePort(tb)
	// The two-node tests exercise the classic transfer (the one Wings
	// speaks) unless they switch live transfers on.
	c.System.Transfers.Live = false
	if mutate != nil {
		mutate(name, c)
	}
	cfgPath := filepath.Join(dir, "config.yml")
	if err := c.Save(cfgPath); err != nil {
		tb.Fatal(err)
	}
	return c, cfgPath
}

// panelView forwards to the shared panel, filters the boot list by the
// node's assignment and tags the node's calls.
func panelView(t testing.TB, panelURL, name string, a *assignment) *httptest.Server {
	t.Helper()
	up, _ := url.Parse(panelURL)
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(up)
		pr.Out.Header.Set("X-Test-Node", name)
	}}
	rp.ModifyResponse = func(res *http.Response) error {
		if res.Request.Method != http.MethodGet || res.Request.URL.Path != "/api/remote/servers" || res.StatusCode != 200 {
			return nil
		}
		var page struct {
			Data []map[string]any `json:"data"`
			Meta map[string]int   `json:"meta"`
		}
		if err := json.NewDecoder(res.Body).Decode(&page); err != nil {
			return err
		}
		res.Body.Close()
		kept := page.Data[:0]
		for _, s := range page.Data {
			if id, _ := s["uuid"].(string); a.has(id) {
				kept = append(kept, s)
			}
		}
		page.Data = kept
		page.Meta["total"], page.Meta["to"] = len(kept), len(kept)
		body, _ := json.Marshal(page)
		res.Body = io.NopCloser(bytes.NewReader(body))
		res.ContentLength = int64(len(body))
		res.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	s := httptest.NewServer(rp)
	t.Cleanup(s.Close)
	return s
}

// reports returns the transfer outcomes the given node reported for id.
func (c *cluster) reports(n *node, id string) []string {
	name := "source"
	if n == c.Target {
		name = "target"
	}
	var out []string
	for _, call := range c.Panel.Calls() {
		if call.Method == "POST" && call.Header.Get("X-Test-Node") == name && strings.HasPrefix(call.Path, "/servers/"+id+"/transfer/") {
			out = append(out, strings.TrimPrefix(call.Path, "/servers/"+id+"/transfer/"))
		}
	}
	return out
}

// alteringProxy forwards to target after changing one byte of the form's
// `checksum` value (the last hex digit).
func alteringProxy(t *testing.T, target string) string {
	t.Helper()
	up, _ := url.Parse(target)
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(up) }}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		marker := []byte("name=\"checksum\"\r\n\r\n")
		i := bytes.Index(body, marker)
		if i < 0 {
			http.Error(w, "no checksum field", http.StatusBadGateway)
			return
		}
		j := i + len(marker) + 63
		if body[j] == '0' {
			body[j] = '1'
		} else {
			body[j] = '0'
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Del("Transfer-Encoding")
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s.URL
}
