package eggconfig

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/wharf/wharf/internal/sandbox"
)

// The server hands Apply the Trusted view of its sandbox; these tests use exactly that.
func newSandbox(t *testing.T, uid, gid int) (*sandbox.FS, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "root")
	sb, err := sandbox.New(dir, sandbox.Options{UID: uid, GID: gid, Denylist: []string{"plugins/"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb, dir
}

func owner(t *testing.T, p string) (uid, gid int, mode fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid), fi.Mode()
}

// An entry whose directories do not exist yet is created with its parents (0755, owned by the
// server's user) and the file (0644), as Wings does. The denylist does not apply: the agent
// writes these files, not the user.
func TestApplyCreatesMissingParentsInSandbox(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 4321, 4322 // prove the owner is set, not inherited from the process
	}
	sb, dir := newSandbox(t, uid, gid)
	files := []File{
		{File: "plugins/Example/config.yml", Parser: "yaml", Replace: []Replacement{rw("server.port", "25565")}},
		{File: "/config/created.json", Parser: "json", Replace: []Replacement{rw("name", "wharf")}},
	}
	if errs := Apply(context.Background(), sb.Trusted(), files, Vars{}, nil); len(errs) != 0 {
		t.Fatalf("Apply: %v", errs)
	}
	for _, c := range []struct {
		rel  string
		mode fs.FileMode
		want string
	}{
		{"plugins", fs.ModeDir | 0o755, ""},
		{"plugins/Example", fs.ModeDir | 0o755, ""},
		{"plugins/Example/config.yml", 0o644, "port: 25565"},
		{"config", fs.ModeDir | 0o755, ""},
		{"config/created.json", 0o644, `"name": "wharf"`},
	} {
		p := filepath.Join(dir, c.rel)
		u, g, mode := owner(t, p)
		if mode != c.mode || u != uid || g != gid {
			t.Errorf("%s: mode %v owner %d:%d, want %v %d:%d", c.rel, mode, u, g, c.mode, uid, gid)
		}
		if c.want != "" {
			data, err := os.ReadFile(p)
			if err != nil || !bytes.Contains(data, []byte(c.want)) {
				t.Errorf("%s: %q %v, want it to contain %q", c.rel, data, err, c.want)
			}
		}
	}
}

// A parent that is a symbolic link out of the root is refused for that file (the others are
// still written), and nothing is created outside the root: not the missing directories below
// the link's target, not the file.
func TestApplyRefusesParentLinkOutOfRoot(t *testing.T) {
	sb, dir := newSandbox(t, -1, -1)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "plugins")); err != nil {
		t.Fatal(err)
	}
	// A link inside the root to a missing directory outside: creating through it must fail too.
	if err := os.Symlink(filepath.Join(outside, "missing"), filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	files := []File{
		{File: "plugins/Example/config.yml", Parser: "yaml", Replace: []Replacement{rw("a", "1")}},
		{File: "plugins/direct.properties", Parser: "properties", Replace: []Replacement{rw("a", "1")}},
		{File: "dangling/sub/x.ini", Parser: "ini", Replace: []Replacement{rw("s.a", "1")}},
		{File: "ok/fine.json", Parser: "json", Replace: []Replacement{rw("a", "1")}},
	}
	errs := Apply(context.Background(), sb.Trusted(), files, Vars{}, nil)
	if len(errs) != 3 {
		t.Fatalf("want 3 refused files, got %d: %v", len(errs), errs)
	}
	for _, err := range errs {
		if !errors.Is(err, sandbox.ErrOutsideRoot) {
			t.Errorf("error %v is not ErrOutsideRoot", err)
		}
	}
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("created outside the root: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(dir, "ok", "fine.json")); err != nil {
		t.Fatalf("the safe entry was not written: %v", err)
	}
}

// swappedFS models a link put in place between the read and the write (the server's own process
// may change its files at any time): the read saw nothing, so Apply creates the parents and the
// file, and that creation must still be refused by the sandbox.
type swappedFS struct{ *sandbox.FS }

func (swappedFS) ReadFile(string, int64) ([]byte, error) { return nil, fs.ErrNotExist }

func TestApplyCreateThroughSwappedLinkRefused(t *testing.T) {
	sb, dir := newSandbox(t, -1, -1)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "plugins")); err != nil {
		t.Fatal(err)
	}
	files := []File{
		{File: "plugins/Example/config.yml", Parser: "yaml", Replace: []Replacement{rw("a", "1")}},
		{File: "plugins/direct.yml", Parser: "yaml", Replace: []Replacement{rw("a", "1")}},
	}
	errs := Apply(context.Background(), swappedFS{sb.Trusted()}, files, Vars{}, nil)
	if len(errs) != 2 {
		t.Fatalf("want 2 refused files, got %v", errs)
	}
	for _, err := range errs {
		if !errors.Is(err, sandbox.ErrOutsideRoot) {
			t.Errorf("error %v is not ErrOutsideRoot", err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("created outside the root: %v", entries)
	}
}
