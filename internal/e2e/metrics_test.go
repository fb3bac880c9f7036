package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// By default there is no metrics endpoint at all: nothing listens for it,
// and the API port has no /metrics for anyone.
func TestMetricsOffByDefault(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true})
	for _, auth := range []string{"-", ""} {
		res, body := n.request("GET", "/metrics", nil, auth)
		if res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), "wharf_") {
			t.Fatalf("GET /metrics on the API port (auth %q): %d %s", auth, res.StatusCode, body)
		}
	}
	if strings.Contains(n.log.String(), "metrics listening") {
		t.Fatalf("a metrics listener started without configuration:\n%s", n.log)
	}
}

// With metrics.bind_address set, scrapes need the token; API requests are
// labelled by route pattern, so requests for any number of servers and
// unknown paths add a bounded number of series.
func TestMetricsEndpoint(t *testing.T) {
	parallelDocker(t)
	const tok = "e2e-scrape-token-0123456789"
	port := freePort(t)
	s := newGameServer(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}, mutate: func(c *config.Config) {
		c.Metrics = config.Metrics{BindAddress: fmt.Sprintf("127.0.0.1:%d", port), Token: tok}
	}})
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	get := func(token string) (int, string) {
		req, _ := http.NewRequest("GET", url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	wait.ForNoError(t, 10*time.Second, func() error {
		res, err := http.Get(url)
		if err == nil {
			res.Body.Close()
		}
		return err
	}, "the metrics endpoint to answer\n%s", n.log)
	for _, bad := range []string{"", n.Token, "nope"} {
		if code, body := get(bad); code != http.StatusUnauthorized || strings.Contains(body, "wharf_") {
			t.Fatalf("scrape with %q: %d", bad, code)
		}
	}

	for i := range 60 {
		n.request("GET", "/api/servers/"+uuid.NewString(), nil, "")
		n.request("GET", fmt.Sprintf("/api/nothing/%d", i), nil, "")
		n.request("GET", "/api/servers/"+uuid.NewString()+"/logs", nil, "-")
	}
	n.request("GET", "/api/system", nil, "")
	code, body := get(tok)
	if code != http.StatusOK {
		t.Fatalf("scrape: %d %s", code, body)
	}
	routes := map[string]bool{}
	series := 0
	re := regexp.MustCompile(`^wharf_api_requests_total\{route="([^"]*)",status="(\d+)"\}`)
	for _, line := range strings.Split(body, "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			routes[m[1]] = true
			series++
		}
	}
	for r := range routes {
		if r != "unmatched" && !strings.Contains(r, "{") && r != "GET /api/system" {
			t.Fatalf("route label %q is not a pattern", r)
		}
		if regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}`).MatchString(r) {
			t.Fatalf("a raw path leaked into a label: %q", r)
		}
	}
	if !routes["GET /api/servers/{server}"] || !routes["unmatched"] || !routes["GET /api/system"] || series > 10 {
		t.Fatalf("%d series for 181 requests on 121 paths; routes %v", series, routes)
	}
	if !strings.Contains(body, `wharf_server_state{server="`+s.UUID+`",state="offline"} 1`) || !strings.Contains(body, `wharf_server_memory_bytes{server="`+s.UUID+`"}`) {
		t.Fatalf("per-server metrics missing:\n%s", body)
	}
	if !strings.Contains(body, "wharf_websocket_sessions 0") || !strings.Contains(body, "wharf_api_request_duration_seconds_bucket") {
		t.Fatalf("node metrics missing:\n%s", body)
	}
}
