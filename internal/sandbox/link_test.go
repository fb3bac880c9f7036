package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLink: a hard link is made between two names of the root; one to a
// file outside (through a link of the root), to a link itself, to a
// directory or from or to a denied name is refused, and nothing outside
// changes.
func TestLink(t *testing.T) {
	fx := newFixture(t)
	before := fx.snapshot(t)
	if err := fx.fs.Link("inside/file.txt", "copy.txt"); err != nil {
		t.Fatal(err)
	}
	var a, b syscall.Stat_t
	if err := syscall.Stat(filepath.Join(fx.root, "inside", "file.txt"), &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(filepath.Join(fx.root, "copy.txt"), &b); err != nil {
		t.Fatal(err)
	}
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Fatalf("copy.txt is not a hard link of inside/file.txt (inodes %d, %d, links %d)", a.Ino, b.Ino, a.Nlink)
	}
	if err := fx.fs.Link("top.txt", "copy.txt"); !errors.Is(err, os.ErrExist) {
		t.Errorf("link over an existing name: %v", err)
	}
	for _, old := range []string{"filelink", "relfilelink", "dirlink", "inside/escape", "inside/nested/up", "goodfilelink", "dangling"} {
		for _, target := range []string{old, old + "/secret.txt"} {
			if err := fx.fs.Link(target, "stolen"); err == nil {
				t.Errorf("link to %s: made", target)
			}
		}
	}
	if err := fx.fs.Link("inside", "dir-link"); err == nil {
		t.Error("link to a directory: made")
	}
	if err := fx.fs.Link("../outside/secret.txt", "stolen"); err == nil {
		t.Error("link to ../outside: made")
	}
	fx.fs.SetDenylist([]string{"*.key"})
	if err := os.WriteFile(filepath.Join(fx.root, "a.key"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := fx.fs.Link("a.key", "open.txt"); !errors.Is(err, ErrDenied) {
		t.Errorf("link to a denied file: %v", err)
	}
	if err := fx.fs.Link("top.txt", "b.key"); !errors.Is(err, ErrDenied) {
		t.Errorf("link to a denied name: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(fx.root, "stolen")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stolen exists: %v", err)
	}
	fx.assertOutsideUnchanged(t, before)
}
