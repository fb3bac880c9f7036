package httpapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/server"
)

const testToken = "node-token-0123456789"

// newTestAPI returns a handler over a valid configuration saved in a temp dir.
func newTestAPI(t *testing.T, mutate func(c *config.Config)) (http.Handler, *config.Store) {
	t.Helper()
	c := config.Defaults()
	c.UUID = "0b8f6b7e-9f59-4bd2-8a43-5d0b1fe7c6a1"
	c.TokenID = "tokenid"
	c.Token = testToken
	c.Remote = "https://panel.example.com"
	dir := t.TempDir()
	c.System.RootDirectory = dir
	if mutate != nil {
		mutate(c)
	}
	path := filepath.Join(dir, "config.yml")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	store := config.NewStore(path, c)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	api := New(Deps{Config: store, Servers: server.NewManager(context.Background(), &server.Deps{Config: store, Log: log}), Log: log, Version: "test", BootTime: time.Now()})
	return api.Handler(), store
}

func do(h http.Handler, method, target string, header map[string]string, body io.Reader) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, body)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
