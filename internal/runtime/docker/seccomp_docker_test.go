package docker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/testutil/testimages"
)

// TestQuotaLockedContainerCannotChangeProjectID runs
// internal/testutil/ioctlprobe in a real container, as a non-root game
// user on a bind-mounted directory of the host, with and without
// QuotaLocked: unlocked, the owner may rewrite a file's fsxattr (project id
// and inherit flag), which is the quota escape; locked, those ioctls fail
// with EPERM, also with upper bits set in the request, while ordinary
// ioctls still work and what Docker's default profile refuses stays
// refused.
func TestQuotaLockedContainerCannotChangeProjectID(t *testing.T) {
	r := newRuntime(t)
	img := testimages.Busybox(context.Background(), t)
	probeDir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(probeDir, "ioctlprobe"), "github.com/wharf/wharf/internal/testutil/ioctlprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build ioctlprobe: %v\n%s", err, out)
	}

	for _, tc := range []struct {
		locked bool
		want   map[string]string
	}{
		{false, map[string]string{
			"FSGETXATTR": "ok", "FSSETXATTR": "ok", "FSSETXATTR_HIGHBITS": "ok",
			"GETFLAGS": "ok", "SETFLAGS": "ok", "FIONREAD": "ok", "UNSHARE": "errno=1",
		}},
		{true, map[string]string{
			"FSGETXATTR": "ok", "FSSETXATTR": "errno=1", "FSSETXATTR_HIGHBITS": "errno=1",
			"GETFLAGS": "ok", "SETFLAGS": "errno=1", "FIONREAD": "ok", "UNSHARE": "errno=1",
		}},
	} {
		data := t.TempDir()
		if err := os.Chmod(data, 0o777); err != nil {
			t.Fatal(err)
		}
		name := testName("seccomp")
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := r.Remove(ctx, name, ""); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
		spec := runtime.ContainerSpec{
			Name:        name,
			Image:       img,
			User:        "1000:1000",
			Entrypoint:  []string{"/probe/ioctlprobe"},
			Cmd:         []string{"/data/file"},
			Labels:      map[string]string{"wharf-test": "1"},
			Mounts:      []runtime.Mount{{Source: probeDir, Target: "/probe", ReadOnly: true}, {Source: data, Target: "/data"}},
			Hardened:    true,
			QuotaLocked: tc.locked,
		}
		ctx := context.Background()
		if err := r.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
		s, err := r.Attach(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		c := newConsole(t, s)
		if err := r.Start(ctx, name); err != nil {
			t.Fatal(err)
		}
		lines := c.expect(t, 30*time.Second, "the probe's last line", func(l string) bool { return strings.HasPrefix(l, "UNSHARE ") })
		got := map[string]string{}
		for _, l := range lines {
			if k, v, ok := strings.Cut(l, " "); ok {
				got[k] = v
			}
		}
		for k, want := range tc.want {
			if got[k] != want {
				t.Errorf("locked=%v: %s = %q, want %q (probe said %q)", tc.locked, k, got[k], want, lines)
			}
		}
	}
}
