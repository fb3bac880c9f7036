package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPelicanConfigurationFile loads a Pelican Wings configuration file as
// it is on a node (testdata/pelican-config.yml, from pelican-dev/wings
// config/config.go): its directories, user, network and Pelican's own keys
// are read; the keys Wharf does not use are the ones
// docs/migrating-from-wings.md lists for a Pelican node.
func TestPelicanConfigurationFile(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "pelican-config.yml"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatalf("a Pelican Wings configuration file is refused: %v", err)
	}
	checks := map[string][2]any{
		"uuid":                                  {c.UUID, "8d4c2a10-3b6e-4f7a-9c1d-5e2f8a0b7c36"},
		"remote":                                {c.Remote, "https://panel.example.org"},
		"system.data":                           {c.System.Data, "/var/lib/pelican/volumes"},
		"system.backup_directory":               {c.System.BackupDirectory, "/var/lib/pelican/backups"},
		"system.username":                       {c.System.Username, "pelican"},
		"system.user.uid":                       {c.System.User.UID, 987},
		"system.user.passwd.directory":          {c.System.User.Passwd.Directory, "/etc/pelican"},
		"system.machine_id.directory":           {c.System.MachineID.Directory, "/etc/pelican/machine-id"},
		"system.sftp.key_only":                  {c.System.SFTP.KeyOnly, false},
		"system.backups.layout":                 {c.System.Backups.Layout, "auto"},
		"docker.network.name":                   {c.Docker.Network.Name, "pelican_nw"},
		"remote_query.custom_headers":           {c.RemoteQuery.CustomHeaders["CF-Access-Client-Id"], "node2.access"},
		"api.remote_download.max_redirects":     {c.API.RemoteDownload.MaxRedirects, 10},
		"system.crash_detection_activity_lines": {c.System.CrashActivityLines, 2},
		"docker.system_ips":                     {len(c.Docker.SystemIPs), 0},
	}
	for key, v := range checks {
		if v[0] != v[1] {
			t.Errorf("%s = %v, want %v", key, v[0], v[1])
		}
	}
	want := []string{
		"BlockBaseDirMount", "Search", "docker.network.IPv6", "docker.use_performant_inspect",
		"system.backups.remove_backups_on_server_delete",
		"system.enable_log_rotate", "system.openat_mode", "system.transfers.storage_pool",
	}
	got := UnknownKeys(src)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("unknown keys (-want +got):\n%s", diff)
	}
}
