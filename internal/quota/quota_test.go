package quota

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/wharf/wharf/internal/quota/quotatest"
	"github.com/wharf/wharf/internal/sandbox"
)

// gameUID is the user the game's writes run as: not root, so without
// CAP_SYS_RESOURCE, which lets root write past a hard limit on ext4.
const gameUID = 4321

const mib = 1 << 20

// serverDir makes <data>/<name> owned by the game's user, with the
// entries given (relative name to size; a name ending in / is a
// directory), and opens it as a sandbox.
func serverDir(t *testing.T, data, name string, entries map[string]int) *sandbox.FS {
	t.Helper()
	root := filepath.Join(data, name)
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for rel, size := range entries {
		p := filepath.Join(root, rel)
		if strings.HasSuffix(rel, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("chown", "-R", "4321:4321", root).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v: %s", err, out)
	}
	files, err := sandbox.New(root, sandbox.Options{UID: gameUID, GID: gameUID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { files.Close() })
	return files
}

// gameWrite writes size bytes of zeros to path with dd, as the game's
// user, as a game process would (not through the sandbox); it returns dd's
// error and output.
func gameWrite(t *testing.T, path string, size int) (string, error) {
	t.Helper()
	cmd := exec.Command("dd", "if=/dev/zero", "of="+path, "bs=64k", "count="+strconv.Itoa(size/(64<<10)), "conv=fsync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: gameUID, Gid: gameUID}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func openQuotas(t *testing.T, data string) *Quotas {
	t.Helper()
	q, err := Open(data)
	if err != nil {
		t.Fatalf("Open on an ext4 mounted with prjquota: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func projectOf(t *testing.T, path string) uint32 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := getxattr(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return a.projid
}

func sizeOf(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func TestTheGameCannotWritePastTheLimit(t *testing.T) {
	data := filepath.Join(quotatest.Mount(t, "prjquota"), "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	files := serverDir(t, data, "srv", map[string]int{"world/region.mca": 768 << 10, "logs/": 0})
	root := files.Root()

	// Control: without the quota, the same writes go through.
	if out, err := gameWrite(t, filepath.Join(root, "logs", "before"), 2*mib); err != nil {
		t.Fatalf("a 2 MiB write before any quota failed: %v: %s", err, out)
	}
	if err := os.Remove(filepath.Join(root, "logs", "before")); err != nil {
		t.Fatal(err)
	}

	q := openQuotas(t, data)
	if err := q.Apply(context.Background(), files, "srv", 1*mib); err != nil {
		t.Fatal(err)
	}

	// 2 MiB into a new file of an existing directory, as the game writes.
	big := filepath.Join(root, "logs", "big")
	out, err := gameWrite(t, big, 2*mib)
	if err == nil || !strings.Contains(out, "quota exceeded") {
		t.Fatalf("a 2 MiB write under a 1 MiB limit: err %v, output %q; want a quota error", err, out)
	}
	if got := sizeOf(t, big); got > 1*mib {
		t.Errorf("the write left %d bytes on disk, more than the 1 MiB limit", got)
	}
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}

	// 512 KiB fits the limit only if the 768 KiB that were there before
	// are not counted: they are.
	if out, err := gameWrite(t, filepath.Join(root, "more"), 512<<10); err == nil {
		t.Fatalf("512 KiB on top of 768 KiB already there passed a 1 MiB limit: %s", out)
	}
	if p := projectOf(t, filepath.Join(root, "world", "region.mca")); p != projectOf(t, root) {
		t.Errorf("existing file is in project %d, the server's is %d", p, projectOf(t, root))
	}
}

func TestNewEntriesInheritTheProject(t *testing.T) {
	data := quotatest.Mount(t, "prjquota")
	files := serverDir(t, data, "srv", map[string]int{"old/": 0})
	q := openQuotas(t, data)
	if err := q.Apply(context.Background(), files, "srv", 4*mib); err != nil {
		t.Fatal(err)
	}
	id := projectOf(t, files.Root())
	if id == 0 {
		t.Fatal("the server directory got no project")
	}
	nested := filepath.Join(files.Root(), "old", "new", "deeper")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nested, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(files.Root(), "old"), nested, filepath.Join(nested, "f")} {
		if got := projectOf(t, p); got != id {
			t.Errorf("%s is in project %d, want %d", p, got, id)
		}
	}
}

func TestRemoveLiftsTheLimit(t *testing.T) {
	data := quotatest.Mount(t, "prjquota")
	files := serverDir(t, data, "srv", nil)
	q := openQuotas(t, data)
	if err := q.Apply(context.Background(), files, "srv", 1*mib); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(files.Root(), "f")
	if _, err := gameWrite(t, target, 2*mib); err == nil {
		t.Fatal("control: the limit did not hold before Remove")
	}
	if err := q.Remove(files.Root()); err != nil {
		t.Fatal(err)
	}
	if out, err := gameWrite(t, target, 2*mib); err != nil {
		t.Fatalf("a 2 MiB write after Remove: %v: %s", err, out)
	}
}

func TestServersGetDistinctProjects(t *testing.T) {
	data := quotatest.Mount(t, "prjquota")
	q := openQuotas(t, data)
	// The same key twice: the derived id collides, the second server must
	// move on to a free one, and each keeps its own on the next Apply.
	a := serverDir(t, data, "a", map[string]int{"f": 1})
	b := serverDir(t, data, "b", map[string]int{"f": 1})
	for _, files := range []*sandbox.FS{a, b, a, b} {
		if err := q.Apply(context.Background(), files, "same", 1*mib); err != nil {
			t.Fatal(err)
		}
	}
	pa, pb := projectOf(t, a.Root()), projectOf(t, b.Root())
	if pa == pb {
		t.Fatalf("two servers share project %d", pa)
	}
	// Each limit is its own: a fills its megabyte, b still writes.
	if _, err := gameWrite(t, filepath.Join(a.Root(), "big"), 2*mib); err == nil {
		t.Fatal("control: a's limit did not hold")
	}
	if out, err := gameWrite(t, filepath.Join(b.Root(), "half"), 512<<10); err != nil {
		t.Fatalf("b could not write 512 KiB after a filled its own limit: %v: %s", err, out)
	}
}

func TestLinksAreNotFollowed(t *testing.T) {
	data := quotatest.Mount(t, "prjquota")
	outside := filepath.Join(data, "outside")
	if err := os.WriteFile(outside, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := serverDir(t, data, "srv", nil)
	if err := os.Symlink(outside, filepath.Join(files.Root(), "link")); err != nil {
		t.Fatal(err)
	}
	q := openQuotas(t, data)
	if err := q.Apply(context.Background(), files, "srv", 1*mib); err != nil {
		t.Fatal(err)
	}
	if p := projectOf(t, outside); p != 0 {
		t.Errorf("the file a link points to outside the server went to project %d", p)
	}
}

func TestOpenRefusesAFilesystemThatDoesNotEnforce(t *testing.T) {
	for _, opts := range []string{"", "noquota"} {
		data := quotatest.Mount(t, opts)
		q, err := Open(data)
		if err == nil {
			q.Close()
			t.Fatalf("Open succeeded on ext4 mounted with %q", opts)
		}
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("mount %q: error %v does not wrap ErrUnsupported", opts, err)
		}
		t.Logf("mount %q: %v", opts, err)
	}
}

func TestOpenRefusesAFilesystemWithoutQuotas(t *testing.T) {
	data := quotatest.MountPlain(t)
	q, err := Open(data)
	if err == nil {
		q.Close()
		t.Fatal("Open succeeded on an ext4 made without quota features")
	}
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("error %v does not wrap ErrUnsupported", err)
	}
	t.Log(err)
}
