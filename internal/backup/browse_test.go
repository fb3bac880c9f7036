package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/backupview"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/sandbox"
)

// browseFixture backs up a tree with every kind of entry twice (a.txt
// changed between) into a repository and opens the view over it.
type browseFixture struct {
	root string
	fsys *sandbox.FS // the user's view (denylist, disk limit)
	view *backupview.View
	svc  *Service
	big  []byte
}

func newBrowseFixture(t *testing.T) *browseFixture {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "srv")
	big := randomData(3<<20 + 123)
	writeTree(t, root, map[string][]byte{
		"a.txt":         []byte("old a"),
		"sub/big.bin":   big,
		"sub/deep/x.db": []byte("secret"),
		"empty.txt":     nil,
		// Names the game may write: the view shows and reads them as
		// they are.
		"hostile/..\\..\\evil": []byte("bs"),
		"hostile/a\nb":         []byte("nl"),
		"hostile/-rf":          []byte("dash"),
		"hostile/ünï €":        []byte("utf"),
		"hostile/" + long(200): []byte("long"),
	})
	os.Chmod(filepath.Join(root, "sub/big.bin"), 0o751)
	os.MkdirAll(filepath.Join(root, "emptydir"), 0o700)
	os.Symlink("../../../etc/passwd", filepath.Join(root, "out"))
	os.Symlink("sub/big.bin", filepath.Join(root, "in"))
	os.Link(filepath.Join(root, "a.txt"), filepath.Join(root, "hard.txt"))
	// A sparse file: a hole, then data.
	sp, _ := os.Create(filepath.Join(root, "sparse.bin"))
	sp.WriteAt([]byte("after the hole"), 5<<20)
	sp.Close()

	c := config.Defaults()
	c.System.BackupDirectory = filepath.Join(dir, "backups")
	c.System.TmpDirectory = filepath.Join(dir, "tmp")
	c.System.Backups.Format = config.BackupFormatRepository
	os.MkdirAll(c.System.TmpDirectory, 0o700)
	svc := New(context.Background(), config.NewStore(filepath.Join(dir, "config.yml"), c), nil, slog.New(slog.DiscardHandler))
	t.Cleanup(svc.Close)
	trusted := benchServer{mustSandbox(t, root, nil)}
	ctx := context.Background()
	if _, err := svc.createRepository(ctx, trusted, "b1", ""); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(root, "hard.txt"))
	writeTree(t, root, map[string][]byte{"a.txt": []byte("new a, longer")})
	if _, err := svc.createRepository(ctx, trusted, "b2", ""); err != nil {
		t.Fatal(err)
	}
	fsys := mustSandbox(t, root, []string{"*.db"})
	return &browseFixture{root: root, fsys: fsys, view: backupview.New(svc.BrowseSource), svc: svc, big: big}
}

func long(n int) string { return string(bytes.Repeat([]byte("x"), n)) }

func mustSandbox(t *testing.T, root string, deny []string) *sandbox.FS {
	t.Helper()
	f, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1, Denylist: deny})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func (f *browseFixture) path(t *testing.T, name string) backupview.Path {
	t.Helper()
	p, err := f.view.Split(f.fsys, name)
	if err != nil || !p.In {
		t.Fatalf("Split(%q) = %+v, %v", name, p, err)
	}
	return p
}

func (f *browseFixture) read(t *testing.T, name string) ([]byte, error) {
	t.Helper()
	file, err := f.view.Open(context.Background(), f.fsys, "bench", f.path(t, name))
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return io.ReadAll(io.NewSectionReader(file, 0, file.Size()))
}

func TestBrowseReadsOldContents(t *testing.T) {
	f := newBrowseFixture(t)
	ctx := context.Background()
	for name, want := range map[string]string{
		"/.backups/b1/a.txt": "old a", "/.backups/b2/a.txt": "new a, longer",
		"/.backups/b1/hard.txt": "old a", "/.backups/b1/empty.txt": "",
		"/.backups/b1/hostile/a\nb": "nl", "/.backups/b1/hostile/..\\..\\evil": "bs",
		"/.backups/b1/hostile/" + long(200): "long",
	} {
		b, err := f.read(t, name)
		if err != nil || string(b) != want {
			t.Errorf("%q: %q, %v; want %q", name, b, err, want)
		}
	}
	b, err := f.read(t, "/.backups/b2/sub/big.bin")
	if err != nil || !bytes.Equal(b, f.big) {
		t.Fatalf("big.bin: %d bytes, %v", len(b), err)
	}
	sp, err := f.read(t, "/.backups/b2/sparse.bin")
	if err != nil || len(sp) != 5<<20+14 || string(sp[5<<20:]) != "after the hole" || bytes.Count(sp[:5<<20], []byte{0}) != 5<<20 {
		t.Fatalf("sparse.bin: %d bytes, %v", len(sp), err)
	}
	// Ranged reads, out of order, as an SFTP client makes them.
	file, err := f.view.Open(ctx, f.fsys, "bench", f.path(t, "/.backups/b1/sub/big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{2 << 20, 17, 3<<20 + 100, 1 << 20, 0} {
		p := make([]byte, 40000)
		n, err := file.ReadAt(p, off)
		want := f.big[off:min(off+40000, int64(len(f.big)))]
		if !bytes.Equal(p[:n], want) || (n < len(p)) != errors.Is(err, io.EOF) {
			t.Fatalf("ReadAt(%d) = %d, %v", off, n, err)
		}
	}
	file.Close()

	// The listing: backups by UUID, then the tree with its kinds.
	infos, err := f.view.List(ctx, f.fsys, "bench", f.path(t, "/.backups"))
	if err != nil || len(infos) != 2 || infos[0].Name() != "b1" || !infos[0].IsDir() {
		t.Fatalf("backups: %v, %v", infos, err)
	}
	infos, err = f.view.List(ctx, f.fsys, "bench", f.path(t, "/.backups/b1"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]fs.FileMode{}
	for _, i := range infos {
		kinds[i.Name()] = i.Mode()
	}
	for name, want := range map[string]fs.FileMode{
		"a.txt": 0o644, "hard.txt": 0o644, "empty.txt": 0o644, "emptydir": fs.ModeDir | 0o700,
		"sub": fs.ModeDir | 0o755, "out": fs.ModeSymlink | 0o777, "in": fs.ModeSymlink | 0o777, "sparse.bin": 0o644,
	} {
		if kinds[name] != want {
			t.Errorf("%s: mode %v, want %v (all: %v)", name, kinds[name], want, kinds)
		}
	}
	if _, ok := kinds["hard.txt"]; !ok {
		t.Error("hard.txt missing")
	}
	st, err := f.view.Stat(ctx, f.fsys, "bench", f.path(t, "/.backups/b1/out"))
	if err != nil || st.Target != "../../../etc/passwd" {
		t.Fatalf("out: %+v, %v", st, err)
	}
	// Links are never followed; the denylist refuses contents, not names.
	if _, err := f.read(t, "/.backups/b1/out"); !errors.Is(err, backupview.ErrLink) {
		t.Fatalf("reading a link: %v", err)
	}
	if _, err := f.read(t, "/.backups/b1/sub/deep/x.db"); !errors.Is(err, sandbox.ErrDenied) {
		t.Fatalf("reading a denied file: %v", err)
	}
	if _, err := f.view.Stat(ctx, f.fsys, "bench", f.path(t, "/.backups/b1/sub/deep/x.db")); err != nil {
		t.Fatalf("stat of a denied file: %v", err)
	}
	for _, name := range []string{"/.backups/b1/nothing", "/.backups/b3/a.txt", "/.backups/b1/../b2/zz"} {
		if _, err := f.read(t, name); !errors.Is(err, sandbox.ErrNotExist) {
			t.Errorf("%q: %v, want ErrNotExist", name, err)
		}
	}
}

func TestBrowseCopyOut(t *testing.T) {
	f := newBrowseFixture(t)
	ctx := context.Background()
	if err := f.view.CopyOut(ctx, f.fsys, "bench", f.path(t, "/.backups/b1/a.txt"), "restored/a.txt"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.root, "restored/a.txt")); string(b) != "old a" {
		t.Fatalf("restored a.txt: %q", b)
	}
	if err := f.view.CopyOut(ctx, f.fsys, "bench", f.path(t, "/.backups/b1/a.txt"), "a.txt"); !errors.Is(err, sandbox.ErrExist) {
		t.Fatalf("onto an existing file: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.root, "a.txt")); string(b) != "new a, longer" {
		t.Fatalf("a.txt changed: %q", b)
	}
	if err := f.view.CopyOut(ctx, f.fsys, "bench", f.path(t, "/.backups/b1/sub"), "sub2"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(f.root, "sub2/big.bin"))
	if err != nil || fi.Mode().Perm() != 0o751 {
		t.Fatalf("sub2/big.bin: %v, %v", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.root, "sub2/big.bin")); !bytes.Equal(b, f.big) {
		t.Fatal("sub2/big.bin differs")
	}
	if _, err := os.Lstat(filepath.Join(f.root, "sub2/deep/x.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a denied file was restored: %v", err)
	}
	// A copy that does not fit: refused, nothing left.
	f.fsys.SetDiskLimit(f.fsys.Usage() + 1<<20)
	if err := f.view.CopyOut(ctx, f.fsys, "bench", f.path(t, "/.backups/b1/sub"), "sub3"); !errors.Is(err, sandbox.ErrNoSpace) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(f.root, "sub3")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("sub3 left behind: %v", err)
	}
	f.fsys.SetDiskLimit(0)
	// The backup is unchanged.
	if b, err := f.read(t, "/.backups/b1/sub/big.bin"); err != nil || !bytes.Equal(b, f.big) {
		t.Fatalf("after the copies: %v", err)
	}
}

func TestBrowseDeletedBackupLeaves(t *testing.T) {
	f := newBrowseFixture(t)
	if _, err := f.read(t, "/.backups/b1/a.txt"); err != nil {
		t.Fatal(err)
	}
	st, err := f.svc.repository(f.svc.cfg.Get())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Delete("bench", "b1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.read(t, "/.backups/b1/a.txt"); !errors.Is(err, sandbox.ErrNotExist) {
		t.Fatalf("a deleted backup: %v", err)
	}
	infos, _ := f.view.List(context.Background(), f.fsys, "bench", f.path(t, "/.backups"))
	if len(infos) != 1 || infos[0].Name() != "b2" {
		t.Fatalf("backups after the delete: %v", infos)
	}
	// A real entry of the folder's name wins: the view steps aside.
	os.Mkdir(filepath.Join(f.root, ".backups"), 0o755)
	if p, err := f.view.Split(f.fsys, "/.backups/b2"); err != nil || p.In {
		t.Fatalf("with a real .backups: %+v, %v", p, err)
	}
}

// TestBrowseStoredIndex (issue 35 follow-up, "the first listing"): a
// backup listed by a view with nothing cached (as after a restart of the
// daemon) is listed from the index stored at backup time, without its
// chunks (the packs are moved away); one without an index is listed from
// its manifest and chunks as before, the same; the index goes with its
// backup (Delete) and an orphan one at the GC.
func TestBrowseStoredIndex(t *testing.T) {
	f := newBrowseFixture(t)
	ctx := context.Background()
	st, _ := f.svc.BrowseSource()
	repo := st.Dir()
	dirs := []string{"/.backups/b1", "/.backups/b1/sub", "/.backups/b1/sub/deep", "/.backups/b1/hostile", "/.backups/b1/emptydir", "/.backups/b2"}
	show := func(is []backupview.Info) string {
		var b strings.Builder
		for _, i := range is {
			fmt.Fprintf(&b, "%q %v %d %d %q\n", i.Name(), i.Mode(), i.Size(), i.ModTime().UnixNano(), i.Target)
		}
		return b.String()
	}
	listAll := func(v *backupview.View) (map[string]string, error) {
		out := map[string]string{}
		for _, d := range dirs {
			p, err := v.Split(f.fsys, d)
			if err != nil {
				return nil, err
			}
			is, err := v.List(ctx, f.fsys, "bench", p)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d, err)
			}
			fi, err := v.Stat(ctx, f.fsys, "bench", p)
			if err != nil {
				return nil, fmt.Errorf("stat %s: %w", d, err)
			}
			out[d] = show(is) + "stat " + show([]backupview.Info{fi})
		}
		return out, nil
	}
	for _, b := range []string{"b1", "b2", "b1.dirs", "b2.dirs"} {
		if _, err := os.Stat(filepath.Join(repo, "views", "bench", b)); err != nil {
			t.Fatalf("no index stored for %s: %v", b, err)
		}
	}
	packs, away := filepath.Join(repo, "packs"), filepath.Join(repo, "packs.away")
	if err := os.Rename(packs, away); err != nil {
		t.Fatal(err)
	}
	v1 := backupview.New(f.svc.BrowseSource)
	indexed, err := listAll(v1)
	if err != nil {
		t.Fatalf("listing from the stored index, chunks away: %v", err)
	}
	if n := v1.IndexedLookups(); n != int64(2*len(dirs)) {
		t.Fatalf("%d lookups answered by the index, want %d", n, 2*len(dirs))
	}
	if !strings.Contains(indexed["/.backups/b1"], `"hard.txt" -rw-r--r-- 5 `) || !strings.Contains(indexed["/.backups/b1"], `"out" L`) ||
		!strings.Contains(indexed["/.backups/b1"], `"emptydir" d`) {
		t.Fatalf("listing of b1 from the index:\n%s", indexed["/.backups/b1"])
	}
	// Control: without the index, listing needs the chunks.
	if err := os.RemoveAll(filepath.Join(repo, "views")); err != nil {
		t.Fatal(err)
	}
	if _, err := listAll(backupview.New(f.svc.BrowseSource)); err == nil {
		t.Fatal("listing without the index nor the chunks succeeded")
	}
	if err := os.Rename(away, packs); err != nil {
		t.Fatal(err)
	}
	v2 := backupview.New(f.svc.BrowseSource)
	built, err := listAll(v2)
	if err != nil {
		t.Fatal(err)
	}
	if v2.IndexedLookups() != 0 {
		t.Fatal("an index was used after it was removed")
	}
	for _, d := range dirs {
		if indexed[d] != built[d] {
			t.Errorf("%s: from the index\n%s\nfrom the manifest\n%s", d, indexed[d], built[d])
		}
	}
	// The index goes with its backup; an orphan one at the GC.
	m2, err := st.Manifest("bench", "b2")
	if err != nil {
		t.Fatal(err)
	}
	if err := backupview.WriteIndex(ctx, st, m2); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete("bench", "b2"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b2", "b2.dirs"} {
		if _, err := os.Stat(filepath.Join(repo, "views", "bench", name)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("index of a deleted backup (%s): %v", name, err)
		}
	}
	orphan := filepath.Join(repo, "views", "bench", "gone")
	if err := os.WriteFile(orphan, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GC(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("orphan index after the GC: %v", err)
	}
}
