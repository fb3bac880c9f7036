package server

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/runtime"
)

// factsEngine is a runtime that only tells its engine's facts.
type factsEngine struct {
	runtime.Runtime
	facts runtime.EngineFacts
}

func (e factsEngine) Facts() runtime.EngineFacts { return e.facts }

// TestInstallScriptDirForRootlessEngine (issue 37): on a rootless engine
// the install script directory belongs to system.username (the engine's
// user), still 0700; on a rootful engine it stays root's even with
// system.user.rootless.enabled, since the hardened installer runs as root
// without dac_override there.
func TestInstallScriptDirForRootlessEngine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another uid")
	}
	cfg := config.Defaults()
	cfg.System.User.UID, cfg.System.User.GID = 54339, 54339
	cfg.System.User.Rootless.Enabled = true
	for _, tc := range []struct {
		rootless bool
		owner    uint32
	}{{true, 54339}, {false, 0}} {
		dir := filepath.Join(t.TempDir(), "script")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		s := &Server{deps: &Deps{Runtime: factsEngine{facts: runtime.EngineFacts{Name: "Podman", Rootless: tc.rootless}}}}
		if err := s.scriptDirForEngine(cfg, dir); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != tc.owner || fi.Mode().Perm() != 0o700 {
			t.Errorf("rootless engine %v: the script directory is %04o owned by %d, want 0700 owned by %d", tc.rootless, fi.Mode().Perm(), uid, tc.owner)
		}
	}
}
