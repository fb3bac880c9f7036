package server

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/quota"
	"github.com/wharf/wharf/internal/quota/quotatest"
	"github.com/wharf/wharf/internal/runtime/runtimetest"
)

// A sync with system.quotas on puts the server's directory under a kernel
// limit of its disk_space: a process of the game's user that writes past
// it (dd, not through the daemon) fails; a later sync with a larger limit
// lets the same write through.
func TestSyncSetsTheKernelQuota(t *testing.T) {
	const gameUID = 4321
	data := filepath.Join(quotatest.Mount(t, "prjquota"), "volumes")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	q, err := quota.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	e, s := newFakeEnv(t, runtimetest.Process{}, func(c *config.Config, d *Deps) {
		c.System.Data = data
		c.System.User.UID, c.System.User.GID = gameUID, gameUID
		d.Quotas = q
	})
	write := func() (string, error) {
		cmd := exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(s.DataDir(), "world.dat"), "bs=64k", "count=32", "conv=fsync")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: gameUID, Gid: gameUID}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, c := range []struct {
		diskMiB int
		fits    bool
	}{{1, false}, {8, true}} {
		e.panel.UpdateSettings(s.UUID(), "build", map[string]any{"memory_limit": 128, "cpu_limit": 100, "disk_space": c.diskMiB})
		if err := s.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		out, err := write()
		if c.fits && err != nil {
			t.Errorf("2 MiB under a %d MiB limit: %v: %s", c.diskMiB, err, out)
		}
		if !c.fits && (err == nil || !strings.Contains(out, "quota exceeded")) {
			t.Errorf("2 MiB under a %d MiB limit: err %v, output %q; want a quota error", c.diskMiB, err, out)
		}
	}
}
