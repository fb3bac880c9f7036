package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func newStore(t *testing.T, mutate func(c *Config)) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	c := validConfig()
	c.System.RootDirectory = filepath.Join(dir, "root")
	c.System.Data = filepath.Join(dir, "root", "volumes")
	c.AllowedMounts = []string{"/srv/shared"}
	c.System.Timezone = "Europe/Amsterdam"
	c.System.User.UID, c.System.User.GID = 988, 988
	if mutate != nil {
		mutate(c)
	}
	path := filepath.Join(dir, "config.yml")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	return NewStore(path, c), path
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Rule 1: ignore_panel_config_updates leaves disk and memory alone.
func TestUpdateIgnoredWhenConfigured(t *testing.T) {
	s, path := newStore(t, func(c *Config) { c.IgnorePanelConfigUpdates = true })
	before := readFile(t, path)
	res, err := s.ApplyPanelUpdate(strings.NewReader(`{"uuid":"x","token_id":"y","token":"new","remote":"https://other.example","debug":true}`))
	if err != nil || res.Applied {
		t.Fatalf("res=%+v err=%v, want not applied", res, err)
	}
	if readFile(t, path) != before || s.Get().Token != "secret-token" || s.Get().Debug {
		t.Fatal("an ignored update changed something")
	}
}

// Rules 2 and 3: the body is merged with defaults, written, then applied.
func TestUpdateMergesWithDefaultsAndApplies(t *testing.T) {
	s, path := newStore(t, func(c *Config) { c.API.UploadLimit = 500; c.Debug = true })
	body := `{"debug":false,"uuid":"0b8f6b7e-9f59-4bd2-8a43-5d0b1fe7c6a1","token_id":"abc","token":"rotated",
		"remote":"https://panel.example.com","api":{"host":"0.0.0.0","port":8443,"ssl":{"enabled":false,"cert":"","key":""}},
		"system":{"data":"/evil","sftp":{"bind_port":2022}},"allowed_mounts":["/"]}`
	res, err := s.ApplyPanelUpdate(strings.NewReader(body))
	if err != nil || !res.Applied {
		t.Fatalf("res=%+v err=%v", res, err)
	}
	got := s.Get()
	if got.Token != "rotated" || got.API.Port != 8443 || got.Debug {
		t.Fatalf("update not applied: token=%q port=%d debug=%v", got.Token, got.API.Port, got.Debug)
	}
	if got.API.UploadLimit != 100 {
		t.Errorf("upload_limit = %d, want the default 100 (omitted keys take defaults)", got.API.UploadLimit)
	}
	if !slices.Contains(res.NeedsRestart, "api.port") {
		t.Errorf("NeedsRestart = %v, want api.port", res.NeedsRestart)
	}
	onDisk, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if onDisk.Token != "rotated" || onDisk.API.Port != 8443 {
		t.Fatal("the file on disk was not updated")
	}
}

// Host-access keys keep their local values whatever the body says or omits.
func TestUpdateKeepsHostAccessKeys(t *testing.T) {
	s, _ := newStore(t, func(c *Config) {
		c.Docker.Network.Name = "custom_nw"
		c.System.Backups.RestoreHostAllowlist = []string{"10.0.0.5"}
		c.System.Backups.Layout = "per_server"
	})
	before := s.Get()
	body := `{"uuid":"u","token_id":"t","token":"x","remote":"https://attacker.example",
		"system":{"root_directory":"/","data":"/etc","backup_directory":"/root","tmp_directory":"/","log_directory":"/",
		"archive_directory":"/","username":"root","user":{"uid":0,"gid":0},"backups":{"restore_host_allowlist":["127.0.0.1"],"layout":"flat"}},
		"allowed_mounts":["/"],"docker":{"network":{"name":"x"}},"ignore_panel_config_updates":false}`
	res, err := s.ApplyPanelUpdate(strings.NewReader(body))
	if err != nil || !res.Applied {
		t.Fatalf("res=%+v err=%v", res, err)
	}
	got := s.Get()
	same := []struct {
		key       string
		got, want any
	}{
		{"remote", got.Remote, before.Remote},
		{"system.root_directory", got.System.RootDirectory, before.System.RootDirectory},
		{"system.data", got.System.Data, before.System.Data},
		{"system.backup_directory", got.System.BackupDirectory, before.System.BackupDirectory},
		{"system.tmp_directory", got.System.TmpDirectory, before.System.TmpDirectory},
		{"system.log_directory", got.System.LogDirectory, before.System.LogDirectory},
		{"system.archive_directory", got.System.ArchiveDirectory, before.System.ArchiveDirectory},
		{"system.username", got.System.Username, before.System.Username},
		{"system.user.uid", got.System.User.UID, before.System.User.UID},
		{"docker.network.name", got.Docker.Network.Name, "custom_nw"},
		{"allowed_mounts", strings.Join(got.AllowedMounts, ","), "/srv/shared"},
		{"restore_host_allowlist", strings.Join(got.System.Backups.RestoreHostAllowlist, ","), "10.0.0.5"},
		{"system.timezone", got.System.Timezone, "Europe/Amsterdam"},
		{"system.backups.layout", got.System.Backups.Layout, "per_server"},
	}
	for _, c := range same {
		if c.got != c.want {
			t.Errorf("%s = %v, want the local value %v", c.key, c.got, c.want)
		}
	}
	for _, k := range []string{"remote", "system.data", "allowed_mounts", "docker"} {
		if !slices.Contains(res.Kept, k) {
			t.Errorf("Kept = %v, want it to name %s", res.Kept, k)
		}
	}
}

// The ACME rule: a cert or key under /etc/letsencrypt/live/ keeps both paths.
func TestUpdateACMEPathsKept(t *testing.T) {
	for _, body := range []string{
		`{"uuid":"u","token_id":"t","token":"x","api":{"ssl":{"enabled":true,"cert":"/etc/letsencrypt/live/n/fullchain.pem","key":"/tmp/k"}}}`,
		`{"uuid":"u","token_id":"t","token":"x","api":{"ssl":{"enabled":true,"cert":"/tmp/c","key":"/etc/letsencrypt/live/n/privkey.pem"}}}`,
	} {
		s, _ := newStore(t, func(c *Config) {
			c.API.SSL = SSL{Enabled: true, Cert: "/opt/tls/cert.pem", Key: "/opt/tls/key.pem"}
		})
		if _, err := s.ApplyPanelUpdate(strings.NewReader(body)); err != nil {
			t.Fatal(err)
		}
		if got := s.Get().API.SSL; got.Cert != "/opt/tls/cert.pem" || got.Key != "/opt/tls/key.pem" {
			t.Fatalf("ssl = %+v, want the existing paths kept", got)
		}
	}
}

// Rule 4: invalid JSON or an invalid configuration changes nothing.
func TestUpdateInvalidChangesNothing(t *testing.T) {
	for name, body := range map[string]string{
		"bad json":       `{"uuid":`,
		"trailing data":  `{"uuid":"u"} {}`,
		"wrong type":     `{"api":{"port":"eighty"}}`,
		"missing token":  `{"uuid":"u","token_id":"t"}`,
		"port too large": `{"uuid":"u","token_id":"t","token":"x","api":{"port":99999}}`,
	} {
		t.Run(name, func(t *testing.T) {
			s, path := newStore(t, nil)
			before := readFile(t, path)
			_, err := s.ApplyPanelUpdate(strings.NewReader(body))
			var de *DecodeError
			var ve *ValidationError
			if !errors.As(err, &de) && !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a decode or validation error", err)
			}
			if readFile(t, path) != before || s.Get().Token != "secret-token" {
				t.Fatal("an invalid update changed the configuration")
			}
		})
	}
}

// Rule 3: a failed write applies nothing.
func TestUpdateWriteFailureAppliesNothing(t *testing.T) {
	s, path := newStore(t, nil)
	// The directory of the target does not exist, so the temporary file cannot be created.
	s = NewStore(filepath.Join(filepath.Dir(path), "missing-dir", "config.yml"), s.Get())
	_, err := s.ApplyPanelUpdate(strings.NewReader(`{"uuid":"u","token_id":"t","token":"new"}`))
	var se *SaveError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a SaveError", err)
	}
	if s.Get().Token != "secret-token" {
		t.Fatal("the running configuration changed although the write failed")
	}
}

// api.remote_download.allow_loopback opens the node itself to user
// downloads: the panel can neither set nor clear it.
func TestUpdateKeepsRemoteDownloadAllowLoopback(t *testing.T) {
	for _, local := range []bool{false, true} {
		s, _ := newStore(t, func(c *Config) { c.API.RemoteDownload.AllowLoopback = local })
		body := `{"uuid":"0b8f6b7e-9f59-4bd2-8a43-5d0b1fe7c6a1","token_id":"abc","token":"t","remote":"https://panel.example.com",
			"api":{"remote_download":{"allow_loopback":` + map[bool]string{true: "false", false: "true"}[local] + `,"max_redirects":3}}}`
		res, err := s.ApplyPanelUpdate(strings.NewReader(body))
		if err != nil || !res.Applied {
			t.Fatalf("res=%+v err=%v", res, err)
		}
		if got := s.Get().API.RemoteDownload; got.AllowLoopback != local || got.MaxRedirects != 3 {
			t.Fatalf("remote_download = %+v, want allow_loopback %v kept", got, local)
		}
		if !slices.Contains(res.Kept, "api.remote_download.allow_loopback") {
			t.Errorf("Kept = %v", res.Kept)
		}
	}
}

// api.require_token_scope is the node's own protection: a panel update,
// which never carries it, must not turn it off.
func TestUpdateKeepsRequireTokenScope(t *testing.T) {
	s, _ := newStore(t, func(c *Config) { c.API.RequireTokenScope = true })
	body := `{"uuid":"u","token_id":"t","token":"x","api":{"host":"0.0.0.0","port":8080,"require_token_scope":false}}`
	res, err := s.ApplyPanelUpdate(strings.NewReader(body))
	if err != nil || !res.Applied {
		t.Fatalf("res=%+v err=%v", res, err)
	}
	if !s.Get().API.RequireTokenScope || !slices.Contains(res.Kept, "api.require_token_scope") {
		t.Fatalf("require_token_scope = %v, kept %v", s.Get().API.RequireTokenScope, res.Kept)
	}
	if Defaults().API.RequireTokenScope {
		t.Fatal("api.require_token_scope must default to false (Pterodactyl 1.11 panels mint no scope)")
	}
}
