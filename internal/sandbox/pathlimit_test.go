package sandbox

import (
	"github.com/wharf/wharf/internal/testutil/deeptree"

	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/usererr"
)

// deepName is n components "d/d/…" followed by last.
func deepName(n int, last string) string {
	return strings.Repeat("d/", n) + last
}

func TestCleanRefusesNamesBeyondTheLimits(t *testing.T) {
	cases := []struct {
		name string
		kind error
		msg  string
	}{
		{deepName(4000, "f.txt"), ErrPathTooLong, "4096 bytes"},
		{strings.Repeat("a", MaxPathLen+1), ErrPathTooLong, "4096 bytes"},
		{deepName(MaxPathDepth, "f"), ErrPathTooDeep, "256 directories"},
		{strings.Repeat("x", MaxNameLen+1), ErrNameTooLong, "255 bytes"},
		{"dir/" + strings.Repeat("x", 300) + "/f", ErrNameTooLong, "255 bytes"},
	}
	for _, c := range cases {
		_, err := clean("mkdir", c.name)
		if !errors.Is(err, c.kind) || !IsPathLimit(err) {
			t.Errorf("clean(%.40q…) = %v, want %v", c.name, err, c.kind)
			continue
		}
		ue, ok := usererr.From(err)
		if !ok || ue.Kind != usererr.Invalid || !strings.Contains(ue.Message, c.msg) {
			t.Errorf("clean(%.40q…): user error %v, want a 400 naming %q", c.name, ue, c.msg)
		}
		if len(err.Error()) > 200 {
			t.Errorf("the error repeats the whole name: %d bytes", len(err.Error()))
		}
	}
}

func TestCleanAcceptsNamesAtTheLimits(t *testing.T) {
	ok := []string{
		deepName(MaxPathDepth-1, "f"),
		strings.Repeat("x", MaxNameLen),
		"/" + strings.Repeat("a/../", 600) + "f", // long input, shallow result
	}
	for _, n := range ok {
		if _, err := clean("mkdir", n); err != nil && len(n) <= MaxPathLen {
			t.Errorf("clean(%.40q…) = %v", n, err)
		}
	}
}

// TestMkdirAllAtTheDepthLimit: 256 components are created; 257 are refused
// before anything is created.
func TestMkdirAllAtTheDepthLimit(t *testing.T) {
	fx := newFixture(t)
	if err := fx.fs.MkdirAll(deepName(MaxPathDepth-1, "last"), 0); err != nil {
		t.Fatalf("256 components: %v", err)
	}
	host := filepath.Join(fx.root, filepath.FromSlash(deepName(MaxPathDepth-1, "last")))
	if fi, err := os.Stat(host); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the deepest directory: %v %v", fi, err)
	}
	err := fx.fs.MkdirAll("e/"+deepName(MaxPathDepth-1, "last"), 0)
	if !errors.Is(err, ErrPathTooDeep) {
		t.Fatalf("257 components: %v, want ErrPathTooDeep", err)
	}
	if _, err := os.Lstat(filepath.Join(fx.root, "e")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused name created something: %v", err)
	}
}

// TestMkdirAllFollowsInRootLinksOnly: the descriptor walk accepts in-root
// links to directories and refuses a link out of the root and a file on
// the way, as the per-prefix walk through the root did.
func TestMkdirAllFollowsInRootLinksOnly(t *testing.T) {
	fx := newFixture(t)
	if err := fx.fs.MkdirAll("goodlink/a/b", 0); err != nil {
		t.Fatalf("through an in-root link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(fx.root, "inside", "a", "b")); err != nil {
		t.Fatalf("not created through the link: %v", err)
	}
	for _, n := range []string{"dirlink/x", "reldirlink/x/y", "loop1/x"} {
		if err := fx.fs.MkdirAll(n, 0); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("MkdirAll(%s) = %v, want ErrOutsideRoot", n, err)
		}
	}
	for _, n := range []string{"top.txt/x", "top.txt", "goodfilelink/x"} {
		if err := fx.fs.MkdirAll(n, 0); !errors.Is(err, ErrNotDir) {
			t.Errorf("MkdirAll(%s) = %v, want ErrNotDir", n, err)
		}
	}
	entries, err := os.ReadDir(fx.outside)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "sub" && e.Name() != "secret.txt" {
			t.Errorf("created outside the root: %s", e.Name())
		}
	}
}

// TestNameTooLongFromTheKernelIsABadRequest: an over-long name that reaches
// the kernel anyway (ENAMETOOLONG) is ErrNameTooLong, a 400, not a 500.
func TestNameTooLongFromTheKernelIsABadRequest(t *testing.T) {
	err := wrap("open", "x", &os.PathError{Op: "openat", Path: "x", Err: syscall.ENAMETOOLONG})
	if !errors.Is(err, ErrNameTooLong) {
		t.Fatalf("wrap(ENAMETOOLONG) = %v", err)
	}
	if ue, ok := usererr.From(err); !ok || ue.Kind != usererr.Invalid {
		t.Fatalf("not a 400: %v", err)
	}
	if !errors.Is(err, unix.ENAMETOOLONG) {
		t.Fatal("the errno is lost")
	}
}

func BenchmarkMkdirAllDepth(b *testing.B) {
	for _, depth := range []int{64, 128, 255} {
		b.Run("depth="+strconv.Itoa(depth), func(b *testing.B) {
			fx := newFixture(b)
			for i := 0; b.Loop(); i++ {
				if err := fx.fs.MkdirAll(strconv.Itoa(i)+"/"+deepName(depth-1, "f"), 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMkdirAllExisting: MkdirAll of a tree that exists, so that only
// the lookups are measured (linear in the depth, not quadratic).
func BenchmarkMkdirAllExisting(b *testing.B) {
	for _, depth := range []int{64, 128, 256} {
		b.Run("depth="+strconv.Itoa(depth), func(b *testing.B) {
			fx := newFixture(b)
			name := deepName(depth-1, "f")
			if err := fx.fs.MkdirAll(name, 0); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := fx.fs.MkdirAll(name, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCopyContextStopsAndLeavesNothing: a copy whose context has ended
// stops before its next chunk, with the context's error (not a generic
// failure), and leaves neither the copy nor its temporary file.
func TestCopyContextStopsAndLeavesNothing(t *testing.T) {
	fx := newFixture(t)
	if err := os.Truncate(filepath.Join(fx.root, "top.txt"), 1<<40); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := fx.fs.CopyContext(ctx, "top.txt", "copy.txt"); !errors.Is(err, context.Canceled) {
		t.Fatalf("CopyContext after the context ended = %v, want context.Canceled", err)
	}
	entries, err := os.ReadDir(fx.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), "copy") || strings.Contains(e.Name(), "wharf-tmp") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// TestResolveWalkAgreesWithResolveInRoot: the descriptor-holding walk finds
// the name the per-prefix walk finds, for every kind of link (in-root,
// out, dangling, chains, loops, "..") and for deep names.
func TestResolveWalkAgreesWithResolveInRoot(t *testing.T) {
	fx := newFixture(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(fx.root, "config", "sub"), 0o755))
	must(os.Symlink("config", filepath.Join(fx.root, "cfgdir")))
	must(os.Symlink("../config/sub", filepath.Join(fx.root, "inside", "tosub")))
	must(os.Symlink("cfgdir/sub", filepath.Join(fx.root, "twohops")))
	must(os.Symlink("../../inside/../config", filepath.Join(fx.root, "config", "sub", "back")))
	must(syscall.Mkfifo(filepath.Join(fx.root, "fifo"), 0o644))
	deep := deepName(200, "")
	must(os.MkdirAll(filepath.Join(fx.root, filepath.FromSlash(deep)), 0o755))
	must(os.Symlink(strings.Repeat("../", 150)+"config", filepath.Join(fx.root, filepath.FromSlash(deep), "up")))
	names := []string{
		"top.txt", "inside/file.txt", "inside/new.txt", "missing/new.txt", "missing/a/b/c",
		"cfgdir/a.yml", "cfgdir/sub/a.yml", "inside/tosub/a.yml", "twohops/a.yml",
		"config/sub/back/sub/back/x", "goodlink/file.txt", "goodlink/nested/x", "goodfilelink",
		"dirlink/secret.txt", "reldirlink/secret.txt", "inside/escape/x", "inside/nested/up/x",
		"loop1/x", "selfloop/x", "dangling", "chain1", "chain1/x", "fifo/x", "top.txt/x", "top.txt",
		deep + "new/a/b", deep + "up/sub/x", deep + "up", deepName(250, "x"), ".",
	}
	for _, n := range names {
		want, wok := fx.fs.s.resolveInRoot(n)
		got, ok := fx.fs.s.resolveWalk(n)
		if ok != wok || got != want {
			t.Errorf("resolveWalk(%.60q) = %.60q %v, resolveInRoot gives %.60q %v", n, got, ok, want, wok)
		}
	}
}

// BenchmarkResolveDeep: resolving a new name below an existing tree of
// the given depth (what the denylist check does for a create whose parent
// is missing), by the descriptor walk and by the per-prefix walk.
func BenchmarkResolveDeep(b *testing.B) {
	for _, depth := range []int{64, 128, 255} {
		fx := newFixture(b)
		if err := os.MkdirAll(filepath.Join(fx.root, filepath.FromSlash(deepName(depth-1, "e"))), 0o755); err != nil {
			b.Fatal(err)
		}
		name := deepName(depth-1, "e/missing/new.txt")
		for _, w := range []struct {
			name string
			fn   func(string) (string, bool)
		}{{"walk", fx.fs.s.resolveWalk}, {"per-prefix", fx.fs.s.resolveInRoot}} {
			b.Run(w.name+"/depth="+strconv.Itoa(depth), func(b *testing.B) {
				for b.Loop() {
					if _, ok := w.fn(name); !ok {
						b.Fatal("not resolved")
					}
				}
			})
		}
	}
}

// FuzzClean: every name either is refused or cleans to a plain downward
// path within the limits (no leading "/", no "." or ".." or empty
// component, at most MaxPathDepth components of at most MaxNameLen bytes),
// and a refused name beyond a limit is a 400 naming it.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"", "/", ".", "a/b/../c", "../x", "a\x00b", deepName(300, "f"),
		strings.Repeat("x", 256), deepName(2100, "f"), "/a//b/./c/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		rel, err := clean("fuzz", name)
		if err != nil {
			if IsPathLimit(err) {
				if ue, ok := usererr.From(err); !ok || ue.Kind != usererr.Invalid {
					t.Fatalf("a path limit that is not a 400: %v", err)
				}
			}
			return
		}
		if rel == "." {
			return
		}
		parts := strings.Split(rel, "/")
		if len(parts) > MaxPathDepth || len(rel) > MaxPathLen {
			t.Fatalf("clean(%q) = %q beyond the limits", name, rel)
		}
		for _, p := range parts {
			if p == "" || p == "." || p == ".." || len(p) > MaxNameLen {
				t.Fatalf("clean(%q) = %q has component %q", name, rel, p)
			}
		}
	})
}

// TestTreesBeyondTheLimitsStillWalk: a tree deeper than MaxPathDepth,
// which the game can make, is refused by name on the user's view, but
// every entry a walk reports can still be opened, read, typed and its links
// read (an archive or a backup of it is whole), and the trusted view
// (restore, transfer) can recreate it. (Beyond PATH_MAX bytes, a denylist
// refuses what it cannot name: see checkOpened.)
func TestTreesBeyondTheLimitsStillWalk(t *testing.T) {
	for _, c := range []struct {
		depth int
		deny  []string
	}{{300, []string{"*.secret"}}, {2200, nil}} {
		t.Run(strconv.Itoa(c.depth), func(t *testing.T) { deepTreeWalks(t, c.depth, c.deny) })
	}
}

func deepTreeWalks(t *testing.T, depth int, deny []string) {
	fx := newFixture(t, Options{Denylist: deny})
	bottom := deepName(depth, "")
	mkdeep(t, fx.root, depth, func(dir string) {
		if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("bottom"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("f.txt", filepath.Join(dir, "link")); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := fx.fs.Stat(bottom + "f.txt"); !IsPathLimit(err) {
		t.Fatalf("Stat of the deep name on the user's view = %v, want a path limit", err)
	}
	var file, link bool
	err := fx.fs.Walk(".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch rel {
		case bottom + "f.txt":
			if fx.fs.DeniedEntry(rel) {
				t.Errorf("the deep file is taken for denied")
			}
			fl, err := fx.fs.OpenEntry(rel, d)
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(fl)
			fl.Close()
			head := make([]byte, 16)
			n, err := fx.fs.ReadHead(rel, d, head)
			if err != nil || string(b) != "bottom" || string(head[:n]) != "bottom" {
				t.Errorf("the deep file: %q %q %v", b, head[:n], err)
			}
			file = true
		case bottom + "link":
			target, err := fx.fs.ReadlinkEntry(rel, d)
			if err != nil || target != "f.txt" {
				t.Errorf("the deep link: %q %v", target, err)
			}
			link = true
		}
		return nil
	})
	if err != nil || !file || !link {
		t.Fatalf("walk: %.200v (file %v, link %v)", err, file, link)
	}
	if fx.fs.Denied(bottom + "f.txt") {
		t.Errorf("Denied takes the deep file for denied")
	}
	if deny != nil && !fx.fs.Denied(bottom+"x.secret") {
		t.Errorf("Denied lets a deep denied name through")
	}
	tr := fx.fs.Trusted()
	if err := tr.MkdirAll("copy/"+bottom, 0); err != nil {
		t.Fatalf("trusted MkdirAll: %.200v", err)
	}
	w, err := tr.OpenFile("copy/"+bottom+"f.txt", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0)
	if err != nil {
		t.Fatalf("trusted create: %.200v", err)
	}
	w.Close()
}

// mkdeep makes depth nested "d" directories below root (deeptree.Chain) and
// calls at with the deepest one as a short /proc path.
func mkdeep(t *testing.T, root string, depth int, at func(dir string)) {
	t.Helper()
	dir, err := deeptree.Chain(root, depth)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	at("/proc/self/fd/" + strconv.Itoa(int(dir.Fd())))
}
