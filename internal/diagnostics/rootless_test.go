package diagnostics

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/config"
	wruntime "github.com/wharf/wharf/internal/runtime"
)

// TestReportSaysWhatARootlessEngineNeedsHere (issue 37): on a rootless
// engine the report names the engine's user (its socket's owner) and, for
// this node, what Wharf fixes at boot (its own 0700 root directory) and
// what the operator must do (subordinate ids), changing nothing.
func TestReportSaysWhatARootlessEngineNeedsHere(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the engine's socket is given to another uid")
	}
	const engineUID = 54338
	dir, err := os.MkdirTemp("", "wharf-diag-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "podman.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chown(sock, engineUID, engineUID); err != nil {
		t.Fatal(err)
	}
	c := config.Defaults()
	c.PlaceUnder(dir)
	c.Docker.Host = "unix://" + sock
	c.System.Username = "root"
	if err := os.MkdirAll(c.System.RootDirectory, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yml")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = Write(context.Background(), &out, Options{ConfigPath: path,
		Runtime: describedEngine{info: wruntime.EngineInfo{Name: "Podman", Version: "4.3.1", Rootless: true, CgroupVersion: "2"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(out.String(), "== Container engine ==")
	section, _, _ = strings.Cut(section, "==")
	for _, want := range []string{
		"for the engine's user (uid 54338, gid 54338)",
		"wharf fixes at boot: " + c.System.RootDirectory + " (0700, 0:0) becomes group 54338, mode 0710",
		"PROBLEM: /etc/subuid has no subordinate uids for uid 54338",
		"PROBLEM: system.username \"root\"",
	} {
		if !strings.Contains(section, want) {
			t.Errorf("the engine section lacks %q:\n%s", want, section)
		}
	}
	if fi, err := os.Stat(c.System.RootDirectory); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the report changed the root directory: %v %v", fi.Mode(), err)
	}
}
