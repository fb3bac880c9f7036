package server

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
)

// A start whose egg configuration names a file in directories that do not exist yet creates
// the directories (0755) and the file (0644), owned by the system user, as Wings does. The
// ownership walk is off, so the owner comes from the sandbox that created them.
func TestDockerStartCreatesConfigFileInMissingDirectories(t *testing.T) {
	const uid, gid = 4321, 4322
	if os.Getuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
	def := gameDef(nil)
	def.ProcessConfiguration["configs"] = []map[string]any{{
		"file": "plugins/Example/config.yml", "parser": "yaml",
		"replace": []map[string]any{{"match": "server.port", "replace_with": "{{server.build.default.port}}"}},
	}}
	e := newDockerEnv(t, envOptions{mutate: func(c *config.Config) {
		c.System.User.UID, c.System.User.GID = uid, gid
		c.System.CheckPermissionsOnBoot = false
	}}, def)
	s := e.server(def.UUID)
	if err := s.Power(context.Background(), PowerStart, time.Second); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, Running)

	root := s.DataDir()
	for _, c := range []struct {
		rel  string
		mode fs.FileMode
	}{
		{"plugins", fs.ModeDir | 0o755},
		{"plugins/Example", fs.ModeDir | 0o755},
		{"plugins/Example/config.yml", 0o644},
	} {
		fi, err := os.Lstat(filepath.Join(root, c.rel))
		if err != nil {
			t.Fatalf("%s: %v", c.rel, err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != c.mode || st.Uid != uid || st.Gid != gid {
			t.Errorf("%s: mode %v owner %d:%d, want %v %d:%d", c.rel, fi.Mode(), st.Uid, st.Gid, c.mode, uid, gid)
		}
	}
	data, err := os.ReadFile(filepath.Join(root, "plugins/Example/config.yml"))
	if err != nil || !strings.Contains(string(data), "port:") {
		t.Fatalf("config.yml: %q %v", data, err)
	}
	for _, l := range s.ConsoleLines(100) {
		if strings.Contains(l, "not updated") || strings.Contains(l, "does not exist") {
			t.Fatalf("console reports a failure: %s", l)
		}
	}
}
