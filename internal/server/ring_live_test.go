package server

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
)

// system.websocket_log_count changed through the configuration store (as /api/update does)
// takes effect on the servers already loaded, without a restart.
func TestConsoleLinesFollowConfigUpdate(t *testing.T) {
	dir := t.TempDir()
	c := config.Defaults()
	c.System.Data = filepath.Join(dir, "volumes")
	c.System.RootDirectory = dir
	c.System.User.UID, c.System.User.GID = -1, -1
	c.System.WebsocketLogCount = 150
	c.UUID, c.TokenID, c.Token, c.Remote = uuid.NewString(), "tid", "token", "http://127.0.0.1:1"
	c.System.LogDirectory, c.System.TmpDirectory = filepath.Join(dir, "log"), filepath.Join(dir, "tmp")
	store := config.NewStore(filepath.Join(dir, "config.yml"), c)
	m := NewManager(context.Background(), &Deps{Config: store})
	var def Definition
	def.Config.UUID = uuid.NewString()
	s, err := m.Add(def)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fill := func(n int) {
		for i := range n {
			s.console.add("line " + strconv.Itoa(i))
		}
	}
	fill(400)
	if got := len(s.ConsoleLines(1000)); got != 150 {
		t.Fatalf("%d lines kept, want 150", got)
	}
	if err := store.Update(func(c *config.Config) { c.System.WebsocketLogCount = 300 }); err != nil {
		t.Fatal(err)
	}
	fill(400)
	if got := len(s.ConsoleLines(1000)); got != 300 {
		t.Fatalf("after the update %d lines kept, want 300", got)
	}
	if err := store.Update(func(c *config.Config) { c.System.WebsocketLogCount = 120 }); err != nil {
		t.Fatal(err)
	}
	if got := s.ConsoleLines(1000); len(got) != 120 || got[119] != "line 399" {
		t.Fatalf("after shrinking %d lines, last %q", len(got), got[len(got)-1])
	}
}
