package sandbox

import (
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// ControlRoot hands fn the root directory's own descriptor: the inode of
// the root, not of a name inside it, and fn's error comes back.
func TestControlRootIsTheRoot(t *testing.T) {
	root := t.TempDir()
	f, err := New(root, Options{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	var got unix.Stat_t
	if err := f.ControlRoot(func(fd int) error { return unix.Fstat(fd, &got) }); err != nil {
		t.Fatal(err)
	}
	if got.Ino != want.Sys().(*syscall.Stat_t).Ino {
		t.Fatalf("inode %d, want the root's %d", got.Ino, want.Sys().(*syscall.Stat_t).Ino)
	}
	if err := f.ControlRoot(func(int) error { return os.ErrInvalid }); err != os.ErrInvalid {
		t.Fatalf("fn's error came back as %v", err)
	}
}
