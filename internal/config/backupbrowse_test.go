package config

import (
	"errors"
	"strings"
	"testing"
)

func TestBackupBrowseDefaults(t *testing.T) {
	c, err := Parse([]byte("uuid: u\ntoken_id: t\ntoken: x\nremote: https://p.example\n"))
	if err != nil {
		t.Fatal(err)
	}
	if b := c.System.Backups; !b.Browse || b.BrowseDirectory != ".backups" {
		t.Fatalf("browse = %v, browse_directory = %q; want true, .backups", b.Browse, b.BrowseDirectory)
	}
	if c.BrowseBackups() {
		t.Fatal("the folder shows with archive-format backups")
	}
	c, err = Parse([]byte("uuid: u\ntoken_id: t\ntoken: x\nremote: https://p.example\nsystem:\n  backups:\n    format: repository\n    browse: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.System.Backups.Browse || c.BrowseBackups() || c.System.Backups.BrowseDirectory != ".backups" {
		t.Fatalf("browse: false: %+v", c.System.Backups)
	}
	c.System.Backups.Browse = true
	if !c.BrowseBackups() {
		t.Fatal("the folder does not show with repository backups")
	}
}

func TestBackupBrowseDirectoryValidation(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "/x", "x\n", " x", strings.Repeat("a", 256)} {
		c := validConfig()
		c.System.Backups.BrowseDirectory = name
		err := c.Validate()
		var ve *ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), "system.backups.browse_directory:") {
			t.Errorf("%q: Validate() = %v, want an error naming the key", name, err)
		}
	}
	for _, name := range []string{".backups", "backups", "Backups (read-only)"} {
		c := validConfig()
		c.System.Backups.BrowseDirectory = name
		if err := c.Validate(); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
}

// The panel knows nothing of the backups folder: an update keeps the
// node's settings.
func TestUpdateKeepsBackupBrowse(t *testing.T) {
	s, _ := newStore(t, func(c *Config) { c.System.Backups.Browse, c.System.Backups.BrowseDirectory = false, "old-backups" })
	res, err := s.ApplyPanelUpdate(strings.NewReader(`{"uuid":"u","token_id":"t","token":"x","remote":"https://panel.example.com"}`))
	if err != nil || !res.Applied {
		t.Fatalf("res=%+v err=%v", res, err)
	}
	if b := s.Get().System.Backups; b.Browse || b.BrowseDirectory != "old-backups" {
		t.Fatalf("after an update: browse %v, browse_directory %q", b.Browse, b.BrowseDirectory)
	}
}
