package configure

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
)

const (
	appKey   = "ptla_9Kq2mX7vB3nL5pR8tY1wZ4cF6hJ0dS2aG5kQ8xV3"
	nodeUUID = "5f2e0e55-7c5b-4c4e-8d3f-2a9f6f7d3c11"
	nodeTok  = "node-token-secret-1b2c3d4e5f"
)

func panelWithNode(t *testing.T) (*devpanel.Panel, *httptest.Server) {
	t.Helper()
	p := devpanel.New("tid", nodeTok)
	srv := httptest.NewTLSServer(p.Handler())
	t.Cleanup(srv.Close)
	p.AddApplicationKey(appKey, true)
	p.AddApplicationKey("ptla_readonly_servers_only", false)
	p.PutNodeConfiguration("3", devpanel.NodeConfiguration(nodeUUID, "tid", nodeTok, srv.URL, 8443))
	return p, srv
}

func TestConfigureWritesTheNodeConfiguration(t *testing.T) {
	p, srv := panelWithNode(t)
	path := filepath.Join(t.TempDir(), "etc", "wharf", "config.yml")
	opts := Options{PanelURL: srv.URL, Token: appKey, Node: "3", Path: path, Client: srv.Client()}
	if _, err := Run(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	calls := p.CallsTo("GET", "/api/application/nodes/3/configuration")
	if len(calls) != 1 {
		t.Fatalf("calls: %+v", p.Calls())
	}
	if h := calls[0].Header; h.Get("Authorization") != "Bearer "+appKey || h.Get("Accept") != "application/vnd.pterodactyl.v1+json" {
		t.Fatalf("headers %v", h)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode: %v %v", fi, err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.UUID != nodeUUID || c.Token != nodeTok || c.API.Port != 8443 || c.Remote != srv.URL || c.System.Data != "/var/lib/pterodactyl/volumes" || c.System.RootDirectory != "/var/lib/service" {
		t.Fatalf("written configuration %+v", c)
	}

	// An existing file is kept unless --override.
	if err := os.WriteFile(path, []byte("uuid: keep-me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), opts)
	if !errors.Is(err, ErrExists) {
		t.Fatalf("err = %v, want ErrExists", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "uuid: keep-me\n" {
		t.Fatalf("file changed without --override: %q", data)
	}
	if n := len(p.CallsTo("GET", "/api/application/nodes/3/configuration")); n != 1 {
		t.Fatalf("the panel was asked although the file exists (%d calls)", n)
	}
	opts.Override = true
	if _, err := Run(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	if c, err := config.Load(path); err != nil || c.UUID != nodeUUID {
		t.Fatalf("--override: %v", err)
	}
}

func TestConfigureExplainsPanelErrors(t *testing.T) {
	_, srv := panelWithNode(t)
	dir := t.TempDir()
	cases := []struct {
		name  string
		token string
		node  string
		want  error
	}{
		{"401", "ptla_wrong", "3", ErrUnauthorized},
		{"403", "ptla_readonly_servers_only", "3", ErrForbidden},
		{"404", appKey, "99", ErrNoNode},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".yml")
			_, err := Run(context.Background(), Options{PanelURL: srv.URL, Token: tc.token, Node: tc.node, Path: path, Client: srv.Client()})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || strings.Contains(msg, tc.token) || !strings.Contains(msg, "("+tc.name+")") {
				t.Fatalf("message %q: one line, naming the status, never the key", msg)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("a file was written after an error")
			}
		})
	}
}

func TestConfigureChecksFlags(t *testing.T) {
	_, srv := panelWithNode(t)
	path := filepath.Join(t.TempDir(), "c.yml")
	base := Options{PanelURL: srv.URL, Token: appKey, Node: "3", Path: path, Client: srv.Client()}
	for name, mutate := range map[string]func(o *Options){
		"no url":      func(o *Options) { o.PanelURL = "" },
		"no token":    func(o *Options) { o.Token = "" },
		"bad node":    func(o *Options) { o.Node = "3/../../x" },
		"bad url":     func(o *Options) { o.PanelURL = "ftp://panel" },
		"plain http":  func(o *Options) { o.PanelURL = "http://panel.example.com" },
		"unreachable": func(o *Options) { o.PanelURL = "https://127.0.0.1:1" },
	} {
		o := base
		mutate(&o)
		_, err := Run(context.Background(), o)
		if err == nil || strings.Contains(err.Error(), appKey) {
			t.Fatalf("%s: err = %v", name, err)
		}
	}
	// Plain http with --allow-insecure, and a self-signed certificate with
	// --allow-insecure and the default client.
	p := devpanel.New("tid", nodeTok)
	p.AddApplicationKey(appKey, true)
	p.PutNodeConfiguration("3", devpanel.NodeConfiguration(nodeUUID, "tid", nodeTok, "https://panel.example.com", 8080))
	plain := httptest.NewServer(p.Handler())
	defer plain.Close()
	if _, err := Run(context.Background(), Options{PanelURL: plain.URL, Token: appKey, Node: "3", Path: path, AllowInsecure: true}); err != nil {
		t.Fatal(err)
	}
	o := base
	o.Client, o.Override = nil, true
	if _, err := Run(context.Background(), o); err == nil {
		t.Fatal("a self-signed certificate was accepted without --allow-insecure")
	}
	o.AllowInsecure = true
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}
