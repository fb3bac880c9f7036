package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWingsConfigurationFile loads a Wings configuration file as it is on a
// node (testdata/wings-config.yml): Wings' key names, its directories and
// network, panel-generated credentials. Keys Wharf does not know are listed
// (the daemon logs them) and kept when Wharf rewrites the file.
func TestWingsConfigurationFile(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "wings-config.yml"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatalf("a Wings configuration file is refused: %v", err)
	}
	checks := map[string][2]any{
		"uuid":                    {c.UUID, "5f2e0e55-7c5b-4c4e-8d3f-2a9f6f7d3c11"},
		"token_id":                {c.TokenID, "Xk2pL9qRz8YtNw4B"},
		"remote":                  {c.Remote, "https://panel.example.com"},
		"system.root_directory":   {c.System.RootDirectory, "/var/lib/pterodactyl"},
		"system.data":             {c.System.Data, "/var/lib/pterodactyl/volumes"},
		"system.backup_directory": {c.System.BackupDirectory, "/var/lib/pterodactyl/backups"},
		"system.log_directory":    {c.System.LogDirectory, "/var/log/pterodactyl"},
		"system.tmp_directory":    {c.System.TmpDirectory, "/tmp/pterodactyl"},
		"system.username":         {c.System.Username, "pterodactyl"},
		"system.user.uid":         {c.System.User.UID, 988},
		"system.timezone":         {c.System.Timezone, "Europe/Berlin"},
		"system.sftp.bind_port":   {c.System.SFTP.BindPort, 2022},
		"docker.network.name":     {c.Docker.Network.Name, "pterodactyl_nw"},
		"docker.network.mode":     {c.Docker.Network.Mode, "pterodactyl_nw"},
		"docker.registries":       {c.Docker.Registries["ghcr.io"].Password, "ghp_registrySecret123"},
		"app_name":                {c.AppName, "Pterodactyl"},
	}
	for key, v := range checks {
		if v[0] != v[1] {
			t.Errorf("%s = %v, want %v", key, v[0], v[1])
		}
	}
	wantUnknown := []string{"docker.use_performant_inspect", "system.enable_log_rotate", "system.openat_mode"}
	if diff := cmp.Diff(wantUnknown, UnknownKeys(src)); diff != "" {
		t.Fatalf("unknown keys (-want +got):\n%s", diff)
	}

	// Rewriting the file (boot-time values, POST /api/update) keeps Wings'
	// own keys, so that Wings finds them after a switch back.
	next := c.Clone()
	next.System.User.UID = 999
	if err := next.Save(path); err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantUnknown, UnknownKeys(saved)); diff != "" {
		t.Fatalf("keys kept after a save (-want +got):\n%s", diff)
	}
	again, err := Load(path)
	if err != nil || again.System.User.UID != 999 {
		t.Fatalf("reload after save: %v %+v", err, again.System.User)
	}
	// Saved once more: the kept keys are not duplicated.
	if err := again.Save(path); err != nil {
		t.Fatal(err)
	}
	saved2, _ := os.ReadFile(path)
	if string(saved2) != string(saved) {
		t.Fatalf("a second save changed the file:\n%s\n---\n%s", saved, saved2)
	}
}

func TestUnknownKeysNested(t *testing.T) {
	doc := []byte("uuid: x\nfuture: 1\napi:\n  port: 1\n  new_thing: {a: 1}\ndocker:\n  registries:\n    r.io: {username: u, password: p, extra: 1}\n  log_config:\n    config: {anything: goes}\n")
	want := []string{"api.new_thing", "docker.registries.r.io.extra", "future"}
	if diff := cmp.Diff(want, UnknownKeys(doc)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if UnknownKeys([]byte("not: [valid")) != nil {
		t.Fatal("an unreadable document has no unknown keys")
	}
}
