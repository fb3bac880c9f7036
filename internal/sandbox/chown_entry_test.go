package sandbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func ownerOf(t *testing.T, p string) (uid, gid int, ctime int64) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return int(st.Uid), int(st.Gid), st.Ctim.Nano()
}

// LchownEntry changes every entry itself (links, not what they point to,
// inside or outside the root) and leaves an entry that already has the
// owner untouched (its ctime does not move).
func TestLchownEntryChangesEntriesNotTargetsAndSkipsOwned(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root")
	}
	fx := newFixture(t, Options{UID: -1, GID: -1})
	const uid, gid = 4321, 4322
	walk := func() {
		t.Helper()
		err := fx.fs.Trusted().Walk(".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return fx.fs.Trusted().LchownEntry(p, d, uid, gid)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	outUID, _, _ := ownerOf(t, filepath.Join(fx.outside, "secret.txt"))
	walk()
	for _, p := range []string{".", "inside", "inside/file.txt", "top.txt", "filelink", "dirlink", "inside/escape"} {
		if u, g, _ := ownerOf(t, filepath.Join(fx.root, p)); u != uid || g != gid {
			t.Errorf("%s: owner %d:%d, want %d:%d", p, u, g, uid, gid)
		}
	}
	if u, _, _ := ownerOf(t, filepath.Join(fx.outside, "secret.txt")); u != outUID {
		t.Errorf("a link's target outside the root was chowned (%d)", u)
	}
	_, _, before := ownerOf(t, filepath.Join(fx.root, "inside/file.txt"))
	// Past the ctime granularity, so that a second chown would show; the
	// absence of a change is what is tested, so there is nothing to wait on.
	time.Sleep(20 * time.Millisecond)
	walk()
	if _, _, after := ownerOf(t, filepath.Join(fx.root, "inside/file.txt")); after != before {
		t.Errorf("an entry that already had the owner was chowned again (ctime %d -> %d)", before, after)
	}
}
