package fdwalk

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLstatAtIsFstatat: the listing's fstatat gives what x/sys/unix's
// does, for a name of the longest length, a link (not followed), a
// missing name, and names no directory can hold (too long, a NUL).
func TestLstatAtIsFstatat(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("n", unix.NAME_MAX)
	if err := os.WriteFile(filepath.Join(dir, long), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	cname := new([unix.NAME_MAX + 1]byte)
	for _, name := range []string{long, "link", "missing", long + "n", "a\x00b", "x"} {
		var got syscall.Stat_t
		var want unix.Stat_t
		gotErr := LstatAt(fd, name, cname, &got)
		wantErr := unix.Fstatat(fd, name, &want, unix.AT_SYMLINK_NOFOLLOW)
		if !errors.Is(gotErr, wantErr) && gotErr != wantErr {
			t.Fatalf("%.12q: error %v, fstatat's %v", name, gotErr, wantErr)
		}
		if gotErr == nil && (got.Ino != want.Ino || got.Mode != want.Mode || got.Size != want.Size) {
			t.Fatalf("%.12q: stat %+v, fstatat's %+v", name, got, want)
		}
	}
	var st syscall.Stat_t
	if err := LstatAt(fd, "link", cname, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		t.Fatalf("the link was followed or failed: %v %o", err, st.Mode)
	}
}
