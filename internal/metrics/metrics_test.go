package metrics

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func scrape(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

func TestHandlerNeedsTheToken(t *testing.T) {
	const tok = "scrape-token-0123456789"
	token := tok
	var wsOpen, sftpOpen atomic.Int64
	wsOpen.Store(3)
	sftpOpen.Store(2)
	m := New()
	reg := NewRegistry(m, Sources{
		Servers: func() []ServerSample {
			return []ServerSample{{UUID: "s1", State: "running", CPUPercent: 12.5, MemoryBytes: 100, MemoryLimitBytes: 200, RxBytes: 3, TxBytes: 4, DiskBytes: 5, Uptime: 90 * time.Second}}
		},
		ActivityPending: func() int64 { return 42 },
		// Read at every scrape: the owners' live counts.
		WebsocketSessions: func() int { return int(wsOpen.Load()) },
		SFTPSessions:      func() int { return int(sftpOpen.Load()) },
	})
	srv := httptest.NewServer(Handler(reg, func() string { return token }, slog.New(slog.DiscardHandler)))
	defer srv.Close()

	for _, bad := range []string{"", "wrong-token", tok + "x"} {
		if code, body := scrape(t, srv.URL, bad); code != http.StatusUnauthorized || strings.Contains(body, "wharf_") {
			t.Fatalf("token %q: %d %s", bad, code, body)
		}
	}
	m.ObserveJob(Backup, nil, 1000, 2*time.Second)
	m.ObserveJob(Restore, errors.New("boom"), 0, time.Second)
	m.PanelError(503)
	m.PanelError(0)
	code, body := scrape(t, srv.URL, tok)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	for _, want := range []string{
		`wharf_server_state{server="s1",state="running"} 1`,
		`wharf_server_state{server="s1",state="offline"} 0`,
		`wharf_server_cpu_percent{server="s1"} 12.5`,
		`wharf_server_memory_limit_bytes{server="s1"} 200`,
		`wharf_server_network_receive_bytes_total{server="s1"} 3`,
		`wharf_server_disk_bytes{server="s1"} 5`,
		`wharf_server_uptime_seconds{server="s1"} 90`,
		`wharf_activity_queue_bytes 42`,
		`wharf_jobs_total{kind="backup",result="success"}`,
		`wharf_job_bytes_total{kind="backup",result="success"}`,
		`wharf_jobs_total{kind="restore",result="failure"}`,
		`wharf_panel_call_errors_total{reason="5xx"}`,
		`wharf_panel_call_errors_total{reason="transport"}`,
		`wharf_sftp_sessions 2`,
		`wharf_websocket_sessions 3`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("scrape lacks %s:\n%s", want, body)
		}
	}
	wsOpen.Store(0)
	sftpOpen.Store(1)
	if _, body := scrape(t, srv.URL, tok); !strings.Contains(body, "wharf_sftp_sessions 1\n") || !strings.Contains(body, "wharf_websocket_sessions 0\n") {
		t.Fatalf("the session gauges are not read at scrape time:\n%s", body)
	}
	// No token configured: nobody gets in.
	token = ""
	if code, _ := scrape(t, srv.URL, ""); code != http.StatusUnauthorized {
		t.Fatalf("empty token: %d", code)
	}
}

func TestRouteLabel(t *testing.T) {
	if Route("") != "unmatched" || Route("GET /api/servers/{server}") != "GET /api/servers/{server}" {
		t.Fatal("route labels")
	}
}

// TestTwoDaemonsCountApart: the node-wide collectors belong to their
// Metrics (rule 1), so two daemons in one process do not share counts; a
// nil Metrics records nothing.
func TestTwoDaemonsCountApart(t *testing.T) {
	a, b := New(), New()
	srvA := httptest.NewServer(Handler(NewRegistry(a, Sources{}), func() string { return "t" }, slog.New(slog.DiscardHandler)))
	defer srvA.Close()
	srvB := httptest.NewServer(Handler(NewRegistry(b, Sources{}), func() string { return "t" }, slog.New(slog.DiscardHandler)))
	defer srvB.Close()
	a.ObserveRequest("GET /api/system", 200, time.Millisecond)
	a.PanelError(502)
	var none *Metrics
	none.ObserveRequest("GET /api/system", 200, time.Millisecond)
	none.ObserveJob(Backup, nil, 1, time.Second)
	none.PanelError(0)
	_, bodyA := scrape(t, srvA.URL, "t")
	_, bodyB := scrape(t, srvB.URL, "t")
	if !strings.Contains(bodyA, `wharf_api_requests_total{route="GET /api/system",status="200"} 1`) || !strings.Contains(bodyA, `wharf_panel_call_errors_total{reason="5xx"} 1`) {
		t.Errorf("daemon A's counts are missing:\n%s", bodyA)
	}
	if strings.Contains(bodyB, "wharf_api_requests_total{") || strings.Contains(bodyB, "wharf_panel_call_errors_total{") {
		t.Errorf("daemon B shows daemon A's counts:\n%s", bodyB)
	}
}
