package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func validConfig() *Config {
	c := Defaults()
	c.UUID = "0b8f6b7e-9f59-4bd2-8a43-5d0b1fe7c6a1"
	c.TokenID = "abc"
	c.Token = "secret-token"
	c.Remote = "https://panel.example.com"
	return c
}

func TestDefaultsFillAbsentKeys(t *testing.T) {
	c, err := Parse([]byte("uuid: u\ntoken_id: t\ntoken: x\nremote: https://p.example\napi:\n  port: 9090\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.API.Port != 9090 {
		t.Errorf("api.port = %d, want 9090", c.API.Port)
	}
	checks := map[string][2]any{
		"api.host":                               {c.API.Host, "0.0.0.0"},
		"api.upload_limit":                       {c.API.UploadLimit, int64(100)},
		"system.root_directory":                  {c.System.RootDirectory, "/var/lib/service"},
		"system.data":                            {c.System.Data, "/var/lib/service/volumes"},
		"system.backup_directory":                {c.System.BackupDirectory, "/var/lib/service/backups"},
		"system.tmp_directory":                   {c.System.TmpDirectory, "/tmp/service"},
		"system.username":                        {c.System.Username, "service"},
		"system.websocket_log_count":             {c.System.WebsocketLogCount, 150},
		"system.crash_detection.timeout":         {c.System.CrashDetection.Timeout, 60},
		"docker.network.name":                    {c.Docker.Network.Name, "service_nw"},
		"docker.container_pid_limit":             {c.Docker.ContainerPidLimit, int64(512)},
		"docker.installer_limits.memory":         {c.Docker.InstallerLimits.Memory, int64(1024)},
		"throttles.lines":                        {c.Throttles.Lines, 2000},
		"remote_query.timeout":                   {c.RemoteQuery.Timeout, 30},
		"remote_query.boot_servers_per_page":     {c.RemoteQuery.BootServersPerPage, 50},
		"app_name":                               {c.AppName, "Wharf"},
		"system.transfers.live":                  {c.System.Transfers.Live, true},
		"system.transfers.compression":           {c.System.Transfers.Compression, "auto"},
		"system.transfers.max_backups":           {c.System.Transfers.MaxBackups, 32},
		"system.transfers.max_backup_size":       {c.System.Transfers.MaxBackupSize, 0},
		"system.sftp.max_handles":                {c.System.SFTP.MaxHandles, 256},
		"system.sftp.max_sessions":               {c.System.SFTP.MaxSessions, 10},
		"system.sftp.max_connections_per_server": {c.System.SFTP.MaxConnectionsPerServer, 32},
		"system.sftp.max_startups":               {c.System.SFTP.MaxStartups, 64},
		"system.sftp.max_startups_per_source":    {c.System.SFTP.MaxStartupsPerSource, 10},
		"system.sftp.login_grace_time":           {c.System.SFTP.LoginGraceTime, 30},
		"system.sftp.upload_gc_headroom":         {c.System.SFTP.UploadGCHeadroom, 32},
		"system.disk_check_interval":             {c.System.DiskCheckInterval, 5},
		"system.disk_walk_interval":              {c.System.DiskWalkInterval, 150},
		"system.disk_entry_limit":                {c.System.DiskEntryLimit, int64(500000)},
		"testing.repository_lease_ttl_ms":        {c.Testing.RepositoryLeaseTTLMS, 0},
	}
	for key, v := range checks {
		if v[0] != v[1] {
			t.Errorf("%s = %v, want %v", key, v[0], v[1])
		}
	}
}

func TestValidationNamesTheKey(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantKey string
	}{
		{"missing uuid", func(c *Config) { c.UUID = "" }, "uuid"},
		{"missing token_id", func(c *Config) { c.TokenID = "" }, "token_id"},
		{"missing token", func(c *Config) { c.Token = "" }, "token"},
		{"missing remote", func(c *Config) { c.Remote = "" }, "remote"},
		{"malformed remote", func(c *Config) { c.Remote = "panel.example.com" }, "remote"},
		{"ftp remote", func(c *Config) { c.Remote = "ftp://panel.example.com" }, "remote"},
		{"port zero", func(c *Config) { c.API.Port = 0 }, "api.port"},
		{"port too large", func(c *Config) { c.API.Port = 70000 }, "api.port"},
		{"bad host", func(c *Config) { c.API.Host = "not an ip" }, "api.host"},
		{"ssl without cert", func(c *Config) { c.API.SSL.Enabled = true; c.API.SSL.Key = "/k" }, "api.ssl.cert"},
		{"relative data dir", func(c *Config) { c.System.Data = "volumes" }, "system.data"},
		{"bad proxy", func(c *Config) { c.API.TrustedProxies = []string{"nope"} }, "api.trusted_proxies[0]"},
		{"bad system ip", func(c *Config) { c.Docker.SystemIPs = []string{"203.0.113.1", "not-an-ip"} }, "docker.system_ips[1]"},
		{"crash activity lines", func(c *Config) { c.System.CrashActivityLines = 101 }, "system.crash_detection_activity_lines"},
		{"bad timezone", func(c *Config) { c.System.Timezone = "Mars/Olympus" }, "system.timezone"},
		{"bad compression", func(c *Config) { c.System.Backups.CompressionLevel = "max" }, "system.backups.compression_level"},
		{"bad backup layout", func(c *Config) { c.System.Backups.Layout = "nested" }, "system.backups.layout"},
		{"bad backup format", func(c *Config) { c.System.Backups.Format = "restic" }, "system.backups.format"},
		{"relative repository", func(c *Config) { c.System.Backups.Repository.Path = "repo" }, "system.backups.repository.path"},
		{"zero timeout", func(c *Config) { c.RemoteQuery.Timeout = 0 }, "remote_query.timeout"},
		{"negative transfer backups", func(c *Config) { c.System.Transfers.MaxBackups = -1 }, "system.transfers.max_backups"},
		{"negative transfer backup size", func(c *Config) { c.System.Transfers.MaxBackupSize = -1 }, "system.transfers.max_backup_size"},
		{"no sftp handles", func(c *Config) { c.System.SFTP.MaxHandles = 0 }, "system.sftp.max_handles"},
		{"no sftp startups per source", func(c *Config) { c.System.SFTP.MaxStartupsPerSource = -1 }, "system.sftp.max_startups_per_source"},
		{"no sftp login grace", func(c *Config) { c.System.SFTP.LoginGraceTime = 0 }, "system.sftp.login_grace_time"},
		{"negative sftp upload gc headroom", func(c *Config) { c.System.SFTP.UploadGCHeadroom = -1 }, "system.sftp.upload_gc_headroom"},
		{"huge sftp upload gc headroom", func(c *Config) { c.System.SFTP.UploadGCHeadroom = 1025 }, "system.sftp.upload_gc_headroom"},
		{"zero disk check interval", func(c *Config) { c.System.DiskCheckInterval = 0 }, "system.disk_check_interval"},
		{"zero disk walk interval", func(c *Config) { c.System.DiskWalkInterval = 0 }, "system.disk_walk_interval"},
		{"relative engine socket", func(c *Config) { c.Docker.Host = "unix://run/podman/podman.sock" }, "docker.host"},
		{"engine without scheme", func(c *Config) { c.Docker.Host = "/run/podman/podman.sock" }, "docker.host"},
		{"engine tcp without port", func(c *Config) { c.Docker.Host = "tcp://10.0.0.5" }, "docker.host"},
		{"engine over ssh", func(c *Config) { c.Docker.Host = "ssh://root@node" }, "docker.host"},
		{"negative entry limit", func(c *Config) { c.System.DiskEntryLimit = -1 }, "system.disk_entry_limit"},
		{"test lease too short", func(c *Config) { c.Testing.RepositoryLeaseTTLMS = 999 }, "testing.repository_lease_ttl_ms"},
		{"negative test lease", func(c *Config) { c.Testing.RepositoryLeaseTTLMS = -1 }, "testing.repository_lease_ttl_ms"},
		{"test lease over the default", func(c *Config) { c.Testing.RepositoryLeaseTTLMS = 60_001 }, "testing.repository_lease_ttl_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(c)
			err := c.Validate()
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate() = %v, want a ValidationError", err)
			}
			if !strings.Contains(err.Error(), tt.wantKey+":") {
				t.Fatalf("error %q does not name %s", err, tt.wantKey)
			}
		})
	}
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("a valid configuration fails: %v", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yml"))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

func TestSaveRoundTripAndMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yml")
	c := validConfig()
	c.AllowedOrigins = []string{"https://a.example"}
	c.Docker.Overhead.Multipliers = map[int64]float64{2048: 1.2}
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %o, want 600", st.Mode().Perm())
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, got, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("round trip differs (-want +got):\n%s", diff)
	}
}

// TestEngineHostDefaultAndAccepted: docker.host is empty by default (the
// environment's DOCKER_HOST, else Docker's socket) and both engines'
// sockets and a TCP address are accepted; the cgroup v1 rootless override
// is off by default.
func TestEngineHostDefaultAndAccepted(t *testing.T) {
	d := Defaults()
	if d.Docker.RootlessWithoutFirewallAccepted {
		t.Fatal("defaults: rootless_without_firewall_accepted is true; want false")
	}
	if d.Docker.Host != "" || d.Docker.RootlessCgroupV1Accepted {
		t.Fatalf("defaults: host %q, rootless_cgroup_v1_accepted %v; want empty and false", d.Docker.Host, d.Docker.RootlessCgroupV1Accepted)
	}
	for _, h := range []string{"", "unix:///var/run/docker.sock", "unix:///run/podman/podman.sock", "unix:///run/user/1000/podman/podman.sock", "tcp://10.0.0.5:2375", "https://engine.example:2376"} {
		c := validConfig()
		c.Docker.Host = h
		if err := c.Validate(); err != nil {
			t.Errorf("docker.host %q: %v", h, err)
		}
	}
}
