package server

import (
	"testing"

	"github.com/wharf/wharf/internal/runtime/runtimetest"
)

// The installer is hardened as an installer (no-new-privileges, no raw
// sockets, a writable root filesystem: the docker runtime maps the flag),
// never as a game server, keeps the PID limit and mounts only its two
// directories.
func TestInstallerSpecIsHardenedAsAnInstaller(t *testing.T) {
	_, s := newFakeEnv(t, runtimetest.Process{})
	spec := s.installerSpec(s.Definition(), "~local/installer:1", "", t.TempDir())
	if !spec.HardenedInstaller || spec.Hardened {
		t.Errorf("installer hardening: installer %v server %v", spec.HardenedInstaller, spec.Hardened)
	}
	if spec.Limits.PidsLimit != 512 {
		t.Errorf("installer PID limit %d, want 512", spec.Limits.PidsLimit)
	}
	if spec.User != "" || spec.Image != "local/installer:1" || len(spec.Mounts) != 2 {
		t.Errorf("installer user %q image %q mounts %+v", spec.User, spec.Image, spec.Mounts)
	}
}
