package panel

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestCustomHeaders: remote_query.custom_headers reach the backend on every
// call, and never replace the daemon's own credentials or content headers
// (as Pelican Wings' remote/http.go).
func TestCustomHeaders(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c := New(func() Settings {
		return Settings{Remote: srv.URL, TokenID: "tid", Token: "tok", Timeout: time.Second, Headers: map[string]string{
			"CF-Access-Client-Id": "id.access", "CF-Access-Client-Secret": "s3cret",
			"authorization": "Bearer stolen", "User-Agent": "other",
		}}
	}, "1.2.3")
	if err := c.ResetServersState(context.Background()); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"Cf-Access-Client-Id": "id.access", "Cf-Access-Client-Secret": "s3cret",
		"Authorization": "Bearer tid.tok", "User-Agent": "Wharf/1.2.3 (id:tid)",
	} {
		if got.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, got.Get(k), v)
		}
	}
}
