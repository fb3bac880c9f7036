package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestBackupDownloadsDefaults(t *testing.T) {
	c, err := Parse([]byte("uuid: u\ntoken_id: t\ntoken: x\nremote: https://p.example\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := BackupDownloads{MaxPerServer: 4, MaxPerNode: 32, StallTimeout: 120}
	if got := c.System.Backups.Downloads; got != want {
		t.Fatalf("system.backups.downloads = %+v, want %+v", got, want)
	}
	c, err = Parse([]byte("uuid: u\ntoken_id: t\ntoken: x\nremote: https://p.example\nsystem:\n  backups:\n    downloads:\n      max_per_node: 7\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.System.Backups.Downloads; got.MaxPerNode != 7 || got.MaxPerServer != 4 || got.StallTimeout != 120 {
		t.Fatalf("one key set: %+v", got)
	}
}

func TestBackupDownloadsValidation(t *testing.T) {
	for _, tt := range []struct {
		mutate func(d *BackupDownloads)
		key    string
	}{
		{func(d *BackupDownloads) { d.MaxPerServer = 0 }, "system.backups.downloads.max_per_server"},
		{func(d *BackupDownloads) { d.MaxPerServer = 1025 }, "system.backups.downloads.max_per_server"},
		{func(d *BackupDownloads) { d.MaxPerNode = -1 }, "system.backups.downloads.max_per_node"},
		{func(d *BackupDownloads) { d.MaxPerNode = 4097 }, "system.backups.downloads.max_per_node"},
		{func(d *BackupDownloads) { d.StallTimeout = 0 }, "system.backups.downloads.stall_timeout"},
		{func(d *BackupDownloads) { d.StallTimeout = 86401 }, "system.backups.downloads.stall_timeout"},
	} {
		c := validConfig()
		tt.mutate(&c.System.Backups.Downloads)
		err := c.Validate()
		var ve *ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), tt.key+":") {
			t.Errorf("%+v: Validate() = %v, want an error naming %s", c.System.Backups.Downloads, err, tt.key)
		}
	}
	c := validConfig()
	c.System.Backups.Downloads = BackupDownloads{MaxPerServer: 1024, MaxPerNode: 1, StallTimeout: 1}
	if err := c.Validate(); err != nil {
		t.Fatalf("bounds: %v", err)
	}
}

// The panel knows nothing of these bounds: an update keeps the local ones.
func TestUpdateKeepsBackupDownloads(t *testing.T) {
	want := BackupDownloads{MaxPerServer: 2, MaxPerNode: 5, StallTimeout: 30}
	s, _ := newStore(t, func(c *Config) { c.System.Backups.Downloads = want })
	res, err := s.ApplyPanelUpdate(strings.NewReader(`{"uuid":"u","token_id":"t","token":"x","remote":"https://panel.example.com"}`))
	if err != nil || !res.Applied {
		t.Fatalf("res=%+v err=%v", res, err)
	}
	if got := s.Get().System.Backups.Downloads; got != want {
		t.Fatalf("after an update: %+v, want %+v", got, want)
	}
	if !slices.Contains(res.Kept, "system.backups.downloads") {
		t.Fatalf("Kept = %v", res.Kept)
	}
}
