package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// deepArchive is a chain of depth directories named "d", each holding a
// file "f" with its level as content, in the order tar lists a tree (a
// directory, its subdirectory "d" before its file "f"): down to the bottom,
// then the files on the way back up.
func deepArchive(t testing.TB, depth int) []byte {
	var ents []any
	p := ""
	for i := 0; i < depth; i++ {
		p += "d/"
		ents = append(ents, &tar.Header{Typeflag: tar.TypeDir, Name: p, Mode: 0o750, ModTime: mtime}, "")
	}
	for i := depth; i > 0; i-- {
		ents = append(ents, &tar.Header{Typeflag: tar.TypeReg, Name: strings.Repeat("d/", i) + "f", ModTime: mtime}, levelBody(i))
	}
	return tarGz(t, ents...)
}

func levelBody(i int) string { return "level " + strings.Repeat("x", i%7) + string(rune('0'+i%10)) }

// openAt opens the directory name of dirfd, and readAt reads its file name.
func openAt(t testing.TB, dirfd int, name string) *os.File {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	return os.NewFile(uintptr(fd), name)
}

func readAt(t testing.TB, dirfd int, name string) []byte {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func openFDs(t testing.TB) int {
	t.Helper()
	e, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(e)
}

// An archive 1,500 levels deep is extracted whole (every level's file, the
// directories' modes) while the extraction holds at most sandbox.MaxHeld directory
// descriptors (plus the few of the stream): the deep levels are closed on
// the way down and reopened through ".." on the way back up.
func TestExtractOfADeepTreeHoldsFewDescriptors(t *testing.T) {
	const depth = 1500
	data := deepArchive(t, depth)
	dst := filepath.Join(t.TempDir(), "root")
	fsys := newFS(t, dst)
	base := openFDs(t)
	peak, calls := 0, 0
	res, err := Extract(context.Background(), bytes.NewReader(data), fsys.Trusted(), ExtractOptions{
		OnEntry: func(string) {
			if calls++; calls%7 == 0 {
				peak = max(peak, openFDs(t))
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Dirs != depth || res.Files != depth {
		t.Fatalf("result %+v, want %d dirs and files", res, depth)
	}
	// 64 directories and a few for the stream and the file being
	// written (a literal, so that raising sandbox.MaxHeld fails here).
	if held := peak - base; held > 72 {
		t.Fatalf("extraction held %d descriptors, want at most 72", held)
	}
	// Check every level through a descriptor walk (the host path is too
	// long for one open).
	fd, err := os.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	dir := fd
	for i := 1; i <= depth; i++ {
		rc, _ := dir.SyscallConn()
		var next *os.File
		_ = rc.Control(func(dfd uintptr) {
			next = openAt(t, int(dfd), "d")
			b := readAt(t, int(dfd), "d/f")
			if string(b) != levelBody(i) {
				t.Fatalf("level %d holds %q, want %q", i, b, levelBody(i))
			}
		})
		st, err := next.Stat()
		if err != nil || st.Mode().Perm() != 0o750 {
			t.Fatalf("level %d: mode %v, %v; want 0750", i, st.Mode(), err)
		}
		dir.Close()
		dir = next
	}
	dir.Close()
}

// Directories swapped by the game process between two entries never make
// the extraction write outside the root: a directory the extraction holds
// open that is moved away and replaced by a link to outside (the rest of
// its entries land in the moved directory, inside), a link to outside
// planted where the archive later needs a directory (replaced, not
// followed), and a deep level the extraction had closed to save
// descriptors, swapped the same way before it goes back up through it.
func TestExtractDirectoriesSwappedForLinksBetweenEntries(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	must(t, os.MkdirAll(outside, 0o755))
	dst := filepath.Join(base, "root")
	const depth = 100
	deep := strings.Repeat("d/", depth)
	swapAt := strings.Repeat("d/", 30) // closed by the time the files come back up
	ents := []any{
		&tar.Header{Typeflag: tar.TypeDir, Name: "a/"}, "",
		&tar.Header{Typeflag: tar.TypeDir, Name: "a/b/"}, "",
		reg("a/b/f1"), "one",
		reg("a/b/f2"), "two",
		reg("e/g/f3"), "three",
		&tar.Header{Typeflag: tar.TypeDir, Name: deep}, "",
		reg(deep + "bottom"), "bottom",
		reg(swapAt + "d/up"), "up",
		reg(swapAt + "up"), "swapped",
		// A closed level's child moved away: its ".." is no longer the
		// level, which is then found again by name from the root.
		&tar.Header{Typeflag: tar.TypeDir, Name: "m/" + deep}, "",
		reg("m/" + swapAt + "d/up"), "up",
		reg("m/" + swapAt + "up"), "by name",
	}
	swap := func(rel string) {
		p := filepath.Join(dst, rel)
		must(t, os.Rename(p, p+".moved"))
		must(t, os.Symlink(outside, p))
	}
	_, err := Extract(context.Background(), bytes.NewReader(tarGz(t, ents...)), newFS(t, dst).Trusted(), ExtractOptions{
		OnEntry: func(name string) {
			switch name {
			case "a/b/f2":
				swap("a/b")
				must(t, os.Symlink(outside, filepath.Join(dst, "e")))
			case swapAt + "up":
				swap(strings.TrimSuffix(swapAt, "/"))
			case "m/" + swapAt + "up":
				must(t, os.Rename(filepath.Join(dst, "m", swapAt, "d"), filepath.Join(dst, "m-moved")))
			}
		},
	})
	if err != nil && !errors.Is(err, ErrUnsafeEntry) {
		t.Fatal(err)
	}
	moved := strings.Repeat("d/", 29) + "d.moved/"
	var found []string
	_ = filepath.WalkDir(outside, func(p string, d fs.DirEntry, err error) error {
		if p != outside {
			found = append(found, p)
		}
		return nil
	})
	if len(found) > 0 {
		t.Fatalf("extraction wrote outside the root: %v", found)
	}
	if err != nil {
		t.Fatalf("extraction refused the swapped tree: %v", err)
	}
	for name, want := range map[string]string{"a/b.moved/f2": "two", "e/g/f3": "three", "a/b.moved/f1": "one",
		moved + "up": "swapped", moved + "d/up": "up", moved + strings.Repeat("d/", depth-30) + "bottom": "bottom",
		"m/" + swapAt + "up": "by name", "m-moved/up": "up"} {
		if b, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
