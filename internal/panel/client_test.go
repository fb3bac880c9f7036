package panel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newClient(url string, timeout time.Duration) *Client {
	return New(func() Settings {
		return Settings{Remote: url, TokenID: "tid", Token: "tok", Timeout: timeout}
	}, "1.2.3")
}

func TestHeaders(t *testing.T) {
	var got http.Header
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		b := make([]byte, 64)
		n, _ := r.Body.Read(b)
		body = string(b[:n])
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	if err := newClient(srv.URL+"/", time.Second).ResetServersState(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Authorization": "Bearer tid.tok",
		"Accept":        "application/vnd.pterodactyl.v1+json",
		"Content-Type":  "application/json",
		"User-Agent":    "Wharf/1.2.3 (id:tid)",
	}
	for k, v := range want {
		if got.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, got.Get(k), v)
		}
	}
	if body != "null" {
		t.Errorf("body = %q, want JSON null", body)
	}
}

func TestPaginationFetchesEveryPageWithBoundedConcurrency(t *testing.T) {
	const total, perPage = 237, 10
	var inFlight, maxInFlight atomic.Int32
	var mu sync.Mutex
	seen := map[int]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond) // a slow panel, so that concurrent requests overlap
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		pp, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
		mu.Lock()
		seen[page]++
		mu.Unlock()
		if page == 0 {
			page = 1
		}
		last := (total + pp - 1) / pp
		var data []RawServer
		for i := (page - 1) * pp; i < min(page*pp, total); i++ {
			data = append(data, RawServer{UUID: fmt.Sprintf("s-%03d", i)})
		}
		_ = json.NewEncoder(w).Encode(ServerListPage{Data: data, Meta: Pagination{CurrentPage: uint(page), LastPage: uint(last), PerPage: uint(pp), Total: total}})
	}))
	defer srv.Close()
	all, err := newClient(srv.URL, 5*time.Second).AllServers(context.Background(), perPage, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != total {
		t.Fatalf("got %d servers, want %d", len(all), total)
	}
	for i, s := range all {
		if s.UUID != fmt.Sprintf("s-%03d", i) {
			t.Fatalf("server %d is %s: order lost", i, s.UUID)
		}
	}
	if seen[0] != 1 || seen[1] != 0 {
		t.Fatalf("first request must be page 0 only once, and page 1 never re-fetched: %v", seen)
	}
	if m := maxInFlight.Load(); m > 3 {
		t.Fatalf("%d requests in flight, want at most 3", m)
	}
}

func TestRetriesServerErrors(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		_ = json.NewEncoder(w).Encode(ServerConfiguration{Settings: json.RawMessage(`{"uuid":"x"}`)})
	}))
	defer srv.Close()
	cfg, err := newClient(srv.URL, 10*time.Second).ServerConfiguration(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 || string(cfg.Settings) != `{"uuid":"x"}` {
		t.Fatalf("calls = %d, settings %s", calls.Load(), cfg.Settings)
	}
}

func TestClientErrorsAreNotRetried(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"errors":[{"code":"NotFoundHttpException","status":"404","detail":"The requested resource could not be found."}]}`))
	}))
	defer srv.Close()
	_, err := newClient(srv.URL, 10*time.Second).ServerConfiguration(context.Background(), "x")
	if !IsNotFound(err) {
		t.Fatalf("err = %v, want a 404 RequestError", err)
	}
	var re *RequestError
	errors.As(err, &re)
	if re.Code != "NotFoundHttpException" || re.Detail == "" {
		t.Fatalf("error detail not parsed: %+v", re)
	}
	if calls.Load() != 1 {
		t.Fatalf("calls = %d, want 1 (4xx is not retried)", calls.Load())
	}
}

func TestTimeoutBoundsTheWholeCall(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	start := time.Now()
	err := newClient(srv.URL, 300*time.Millisecond).ResetServersState(context.Background())
	if err == nil {
		t.Fatal("a hanging backend did not time out")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a deadline error", err)
	}
	// Generous bound: the point is that it does not hang, not how fast it gives up.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %s", d)
	}
}

func TestBackupPartsCarryBothSpellings(t *testing.T) {
	b, err := json.Marshal(BackupStatus{Parts: []BackupPart{{PartNumber: 1, ETag: `"abc"`}}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Parts []map[string]any `json:"parts"`
	}
	_ = json.Unmarshal(b, &got)
	p := got.Parts[0]
	if p["part_number"] != float64(1) || p["PartNumber"] != float64(1) || p["etag"] != `"abc"` || p["ETag"] != `"abc"` {
		t.Fatalf("part = %v", p)
	}
}
