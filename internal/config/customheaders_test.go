package config

import (
	"slices"
	"strings"
	"testing"
)

// remote_query.custom_headers are the node's own: a panel update (which
// never carries them) keeps them, and they survive a save and a load.
func TestCustomHeadersKeptOnPanelUpdate(t *testing.T) {
	headers := map[string]string{"CF-Access-Client-Id": "id.access", "CF-Access-Client-Secret": "s3cret"}
	s, path := newStore(t, func(c *Config) { c.RemoteQuery.CustomHeaders = headers })
	body := `{"uuid":"0b8f6b7e-9f59-4bd2-8a43-5d0b1fe7c6a1","token_id":"abc","token":"rotated","remote":"https://panel.example.com",
		"remote_query":{"timeout":30,"boot_servers_per_page":50,"custom_headers":{"X-Evil":"1"}}}`
	res, err := s.ApplyPanelUpdate(strings.NewReader(body))
	if err != nil || !res.Applied {
		t.Fatalf("res=%+v err=%v", res, err)
	}
	if got := s.Get().RemoteQuery.CustomHeaders; len(got) != 2 || got["CF-Access-Client-Secret"] != "s3cret" {
		t.Fatalf("custom headers after a panel update: %v", got)
	}
	if !slices.Contains(res.Kept, "remote_query.custom_headers") {
		t.Errorf("kept %v, want remote_query.custom_headers listed", res.Kept)
	}
	loaded, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.RemoteQuery.CustomHeaders["CF-Access-Client-Id"] != "id.access" {
		t.Fatalf("custom headers on disk: %v", loaded.RemoteQuery.CustomHeaders)
	}
}

func TestCustomHeadersValidated(t *testing.T) {
	for _, h := range []map[string]string{{"Bad Name": "v"}, {"X-Ok": "line\r\nInjected: 1"}, {"": "v"}} {
		c := validConfig()
		c.RemoteQuery.CustomHeaders = h
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "custom_headers") {
			t.Errorf("%q: Validate = %v, want a remote_query.custom_headers error", h, err)
		}
	}
	c := validConfig()
	c.RemoteQuery.CustomHeaders = map[string]string{"CF-Access-Client-Id": "a.b"}
	if err := c.Validate(); err != nil {
		t.Errorf("valid headers refused: %v", err)
	}
}
