package httpapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/config"
)

func TestBearerAuthentication(t *testing.T) {
	h, _ := newTestAPI(t, nil)
	tests := []struct {
		name       string
		header     *string
		wantStatus int
	}{
		{"missing", nil, http.StatusUnauthorized},
		{"empty", ptr(""), http.StatusUnauthorized},
		{"Bearer alone", ptr("Bearer"), http.StatusUnauthorized},
		{"Bearer and a space", ptr("Bearer "), http.StatusUnauthorized},
		{"lowercase bearer", ptr("bearer " + testToken), http.StatusUnauthorized},
		{"Basic scheme", ptr("Basic " + testToken), http.StatusUnauthorized},
		{"two spaces", ptr("Bearer  " + testToken), http.StatusForbidden},
		{"wrong token", ptr("Bearer wrong"), http.StatusForbidden},
		{"token prefix only", ptr("Bearer " + testToken[:5]), http.StatusForbidden},
		{"right token", ptr("Bearer " + testToken), http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tt.header != nil {
				hdr["Authorization"] = *tt.header
			}
			rec := do(h, http.MethodGet, "/api/system", hdr, nil)
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d (body %s)", rec.Code, tt.wantStatus, rec.Body)
			}
			id := rec.Header().Get("X-Request-Id")
			if id == "" {
				t.Fatal("no X-Request-Id header")
			}
			wantWWW := ""
			if tt.wantStatus == http.StatusUnauthorized {
				wantWWW = "Bearer"
			}
			if got := rec.Header().Get("WWW-Authenticate"); got != wantWWW {
				t.Fatalf("WWW-Authenticate = %q, want %q", got, wantWWW)
			}
			if tt.wantStatus == http.StatusOK {
				return
			}
			var body errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body is not JSON: %v: %s", err, rec.Body)
			}
			if body.Error == "" || body.RequestID != id {
				t.Fatalf("body = %+v, want an error and request_id %s", body, id)
			}
		})
	}
}

func TestRequestIDOnEveryResponse(t *testing.T) {
	h, _ := newTestAPI(t, nil)
	auth := map[string]string{"Authorization": "Bearer " + testToken}
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/api/system", 200},
		{http.MethodGet, "/api/servers/00000000-0000-0000-0000-000000000000", 404},
		{http.MethodGet, "/nowhere", 404},
		{http.MethodDelete, "/api/system", 405},
		{http.MethodPost, "/api/update", 400},
		{http.MethodGet, "/api/system", 401}, // no token: auth overridden below
	} {
		hdr := auth
		if tc.want == 401 {
			hdr = nil
		}
		rec := do(h, tc.method, tc.path, hdr, strings.NewReader("{"))
		if rec.Code != tc.want || rec.Header().Get("X-Request-Id") == "" {
			t.Errorf("%s %s: status %d (want %d), X-Request-Id %q", tc.method, tc.path, rec.Code, tc.want, rec.Header().Get("X-Request-Id"))
		}
		// Pelican's panel takes an answer without a User-Agent for a
		// connection error; a "Pelican Wings/..." one must carry our token id.
		if ua := rec.Header().Get("User-Agent"); ua != "Wharf/test (id:tokenid)" {
			t.Errorf("%s %s: User-Agent %q, want %q", tc.method, tc.path, ua, "Wharf/test (id:tokenid)")
		}
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s %s: Content-Type %q, want JSON", tc.method, tc.path, ct)
		}
	}
}

func TestUnknownAPIPathNeedsTheToken(t *testing.T) {
	h, _ := newTestAPI(t, nil)
	if rec := do(h, http.MethodGet, "/api/does-not-exist", nil, nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("status = %d, want 401 before revealing anything", rec.Code)
	}
	rec := do(h, http.MethodGet, "/api/does-not-exist", map[string]string{"Authorization": "Bearer " + testToken}, nil)
	if rec.Code != http.StatusNotFound {
		t.Fatalf("status = %d, want 404", rec.Code)
	}
}

func TestPanicBecomesJSON500(t *testing.T) {
	_, store := newTestAPI(t, nil)
	var logs bytes.Buffer
	api := New(Deps{Config: store, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	h := api.identify(api.requestID(api.recoverPanics(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))))
	rec := do(h, http.MethodGet, "/x", nil, nil)
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status = %d, want 500", rec.Code)
	}
	if ua := rec.Header().Get("User-Agent"); !strings.HasPrefix(ua, "Wharf/") {
		t.Errorf("a 500 answer without our User-Agent (%q): Pelican reads it as a connection error", ua)
	}
	var body errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.RequestID == "" {
		t.Fatalf("body = %s, want JSON with request_id", rec.Body)
	}
	if !strings.Contains(logs.String(), "boom") {
		t.Fatal("the panic was not logged")
	}
}

func TestCORS(t *testing.T) {
	h, _ := newTestAPI(t, func(c *config.Config) {
		c.AllowedOrigins = []string{"https://console.example.org"}
	})
	tests := []struct {
		origin, wantAllow string
	}{
		{"", "https://panel.example.com"},
		{"https://panel.example.com", "https://panel.example.com"},
		{"https://console.example.org", "https://console.example.org"},
		{"https://evil.example.net", ""},
	}
	for _, tt := range tests {
		hdr := map[string]string{"Authorization": "Bearer " + testToken}
		if tt.origin != "" {
			hdr["Origin"] = tt.origin
		}
		rec := do(h, http.MethodGet, "/api/system", hdr, nil)
		if got := rec.Header().Get("Access-Control-Allow-Origin"); got != tt.wantAllow {
			t.Errorf("origin %q: Allow-Origin = %q, want %q", tt.origin, got, tt.wantAllow)
		}
		wantCred := "true"
		if tt.wantAllow == "" {
			wantCred = ""
		}
		if got := rec.Header().Get("Access-Control-Allow-Credentials"); got != wantCred {
			t.Errorf("origin %q: Allow-Credentials = %q, want %q", tt.origin, got, wantCred)
		}
	}
	// A preflight is answered without a token.
	rec := do(h, http.MethodOptions, "/api/servers", map[string]string{"Origin": "https://console.example.org"}, nil)
	if rec.Code != http.StatusNoContent || rec.Header().Get("Access-Control-Allow-Methods") == "" {
		t.Fatalf("preflight: status %d, headers %v", rec.Code, rec.Header())
	}
}

func TestCORSWildcardNeverSendsStar(t *testing.T) {
	h, _ := newTestAPI(t, func(c *config.Config) { c.AllowedOrigins = []string{"*"} })
	rec := do(h, http.MethodGet, "/api/system", map[string]string{"Authorization": "Bearer " + testToken, "Origin": "https://any.example"}, nil)
	if got := rec.Header().Get("Access-Control-Allow-Origin"); got != "https://any.example" {
		t.Fatalf("Allow-Origin = %q, want the echoed origin (never * with credentials)", got)
	}
}

func TestTrustedProxies(t *testing.T) {
	_, store := newTestAPI(t, func(c *config.Config) { c.API.TrustedProxies = []string{"10.0.0.0/8"} })
	api := New(Deps{Config: store})
	tests := []struct{ remote, xff, want string }{
		{"192.0.2.1:1234", "203.0.113.9", "192.0.2.1"},              // untrusted peer: header ignored
		{"10.1.2.3:1234", "203.0.113.9", "203.0.113.9"},             // trusted proxy
		{"10.1.2.3:1234", "198.51.100.7, 10.9.9.9", "198.51.100.7"}, // chain of proxies
		{"10.1.2.3:1234", "", "10.1.2.3"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = tt.remote
		if tt.xff != "" {
			req.Header.Set("X-Forwarded-For", tt.xff)
		}
		if got := api.clientIP(req); got != tt.want {
			t.Errorf("remote %s xff %q: got %s, want %s", tt.remote, tt.xff, got, tt.want)
		}
	}
}

func TestRedactQuery(t *testing.T) {
	got := RedactQuery("token=eyJhbGciOi.secret.sig&directory=%2Fplugins")
	if strings.Contains(got, "secret") || !strings.Contains(got, "directory=%2Fplugins") {
		t.Fatalf("RedactQuery = %q", got)
	}
}

func ptr(s string) *string { return &s }
