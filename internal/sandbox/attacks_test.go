package sandbox

// Security tests named after the attacks in shared/reference/attacks.md
// section 1A (F1-F12): every operation of the sandbox is run against hostile
// names (links to a directory and to a file outside, dangling links pointing
// outside, a two-hop dangling chain, "../" paths, absolute paths, symlink
// loops, trailing slashes) and must neither read, create, change, chmod,
// chown, delete nor reveal anything outside the root.

import (
	"bytes"
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
	"time"
)

// hostileNames are the attack inputs; absName is added per fixture.
var hostileNames = []string{
	"dirlink", "dirlink/", "dirlink/.", "dirlink/secret.txt", "dirlink/new.txt", "dirlink/sub/new",
	"dirlink/sub/deep.txt", "reldirlink/secret.txt", "reldirlink/", "reldirlink/new.txt",
	"filelink", "filelink/", "filelink/.", "relfilelink",
	"dangling", "dangling/", "dangling/x", "reldangling",
	"chain1", "chain1/", "chain1/x", "chain2",
	"../outside/secret.txt", "../outside/new.txt", "..", "../", "a/../../outside/secret.txt",
	"/../outside/secret.txt", "inside/../../outside/secret.txt",
	"loop1", "loop1/x", "selfloop", "selfloop/",
	"inside/escape", "inside/escape/secret.txt", "inside/escape/new.txt",
	"inside/nested/up/secret.txt", "inside/nested/up/new.txt",
}

// op is one sandbox operation applied to an attacker-chosen name. It
// returns what it read (to be checked for leaked content) and its error.
type op struct {
	name string
	run  func(f *FS, name string) (leak string, err error)
}

var t0 = time.Date(2020, 2, 2, 2, 2, 2, 0, time.UTC)

func infoLeak(fx *fixture, fi fs.FileInfo) string {
	if fi == nil {
		return ""
	}
	for _, p := range []string{"", "secret.txt", "sub", "sub/deep.txt"} {
		o, err := os.Stat(filepath.Join(fx.outside, p))
		if err == nil && os.SameFile(o, fi) {
			return "stat of outside " + p
		}
	}
	return ""
}

func operations(fx *fixture) []op {
	return []op{
		{"read", func(f *FS, n string) (string, error) {
			b, err := f.ReadFile(n, 0)
			return string(b), err
		}},
		{"open", func(f *FS, n string) (string, error) {
			r, err := f.Open(n)
			if err != nil {
				return "", err
			}
			defer r.Close()
			b, _ := io.ReadAll(r)
			return string(b), nil
		}},
		{"write", func(f *FS, n string) (string, error) {
			w, err := f.Create(n)
			if err != nil {
				return "", err
			}
			defer w.Close()
			_, err = w.Write([]byte("pwned"))
			return "", err
		}},
		{"append", func(f *FS, n string) (string, error) {
			w, err := f.OpenFile(n, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return "", err
			}
			defer w.Close()
			_, err = w.Write([]byte("pwned"))
			return "", err
		}},
		{"rdwr-read", func(f *FS, n string) (string, error) {
			w, err := f.OpenFile(n, os.O_RDWR, 0)
			if err != nil {
				return "", err
			}
			defer w.Close()
			b, _ := io.ReadAll(w)
			return string(b), nil
		}},
		{"create-excl", func(f *FS, n string) (string, error) {
			w, err := f.OpenFile(n, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err == nil {
				w.Close()
			}
			return "", err
		}},
		{"write-atomic", func(f *FS, n string) (string, error) {
			return "", f.WriteFileAtomic(n, strings.NewReader("pwned"), 0o644)
		}},
		{"mkdir", func(f *FS, n string) (string, error) { return "", f.Mkdir(n, 0o755) }},
		{"mkdirall", func(f *FS, n string) (string, error) { return "", f.MkdirAll(n+"/made/deeper", 0o755) }},
		{"rename-from", func(f *FS, n string) (string, error) { return "", f.Rename(n, "renamed-here") }},
		{"rename-to", func(f *FS, n string) (string, error) { return "", f.Rename("top.txt", n) }},
		{"rename-into", func(f *FS, n string) (string, error) { return "", f.Rename("top.txt", n+"/moved.txt") }},
		{"copy-from", func(f *FS, n string) (string, error) {
			err := f.Copy(n, "copied-here")
			b, _ := os.ReadFile(filepath.Join(fx.root, "copied-here"))
			return string(b), err
		}},
		{"copy-to", func(f *FS, n string) (string, error) { return "", f.Copy("top.txt", n) }},
		{"remove", func(f *FS, n string) (string, error) { return "", f.Remove(n) }},
		{"remove-child", func(f *FS, n string) (string, error) { return "", f.Remove(n + "/secret.txt") }},
		{"removeall", func(f *FS, n string) (string, error) { return "", f.RemoveAll(context.Background(), n) }},
		{"removeall-child", func(f *FS, n string) (string, error) { return "", f.RemoveAll(context.Background(), n+"/sub") }},
		{"chmod", func(f *FS, n string) (string, error) { return "", f.Chmod(n, 0o777) }},
		{"chown", func(f *FS, n string) (string, error) { return "", f.Chown(n, 4242, 4242) }},
		{"lchown", func(f *FS, n string) (string, error) { return "", f.Lchown(n, 4242, 4242) }},
		{"chtimes", func(f *FS, n string) (string, error) { return "", f.Chtimes(n, t0, t0) }},
		{"lchtimes", func(f *FS, n string) (string, error) { return "", f.Lchtimes(n, t0, t0) }},
		{"symlink", func(f *FS, n string) (string, error) { return "", f.Symlink("/etc/passwd", n) }},
		{"stat", func(f *FS, n string) (string, error) {
			fi, err := f.Stat(n)
			return infoLeak(fx, fi), err
		}},
		{"lstat", func(f *FS, n string) (string, error) {
			fi, err := f.Lstat(n)
			return infoLeak(fx, fi), err
		}},
		{"readlink", func(f *FS, n string) (string, error) {
			_, err := f.Readlink(n)
			return "", err
		}},
		{"list", func(f *FS, n string) (string, error) {
			es, err := f.ReadDir(n)
			var leak []string
			for _, e := range es {
				if e.Name() == "secret.txt" || e.Name() == "sub" {
					leak = append(leak, e.Name())
				}
			}
			return strings.Join(leak, ","), err
		}},
		{"walk", func(f *FS, n string) (string, error) {
			var leak []string
			err := f.Walk(n, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				if strings.HasSuffix(p, "secret.txt") || strings.HasSuffix(p, "deep.txt") {
					leak = append(leak, p)
				}
				if fi, err := d.Info(); err == nil {
					if l := infoLeak(fx, fi); l != "" && d.Type()&fs.ModeSymlink == 0 {
						leak = append(leak, l)
					}
				}
				return nil
			})
			return strings.Join(leak, ","), err
		}},
		{"usage", func(f *FS, n string) (string, error) {
			// Removing the name first must not make usage count outside bytes.
			_ = f.Remove(n)
			u, err := f.RefreshUsage(context.Background())
			if want, werr := diskBytesOf(fx.root); werr != nil || u != want {
				return "usage " + strconv.FormatInt(u, 10), err
			}
			return "", err
		}},
	}
}

// TestF1F2F3F4F5F6AttackMatrix runs every operation against every hostile
// name, each on a fresh fixture, and checks that nothing outside changed and
// nothing from outside was returned.
func TestF1F2F3F4F5F6AttackMatrix(t *testing.T) {
	fx0 := newFixture(t)
	names := append(append([]string{}, hostileNames...),
		filepath.Join(fx0.outside, "secret.txt"), // absolute host paths mean "inside the root"
		fx0.outside+"/")
	for _, o := range operations(fx0) {
		t.Run(o.name, func(t *testing.T) {
			dir := t.TempDir()
			for i, n := range names {
				fx := newFixtureIn(t, filepath.Join(dir, strconv.Itoa(i)))
				n = strings.ReplaceAll(n, fx0.outside, fx.outside)
				before := fx.snapshot(t)
				leak, err := operations(fx)[indexOf(operations(fx), o.name)].run(fx.fs, n)
				if strings.Contains(leak, secret) || (leak != "" && !strings.Contains(leak, "inside data")) {
					t.Errorf("%s %q leaked outside data: %q", o.name, n, leak)
				}
				// The name the caller gave may be echoed; the host path of the root never.
				if err != nil && strings.Contains(err.Error(), fx.root) {
					t.Errorf("%s %q: error leaks a host path: %v", o.name, n, err)
				}
				fx.assertOutsideUnchanged(t, before)
			}
		})
	}
}

func indexOf(ops []op, name string) int {
	for i, o := range ops {
		if o.name == name {
			return i
		}
	}
	panic(name)
}

// TestF3DanglingSymlinkCreate: writing through a dangling link, or a chain
// of two, pointing outside is refused as a bad path for every writer, and
// nothing is created outside.
func TestF3DanglingSymlinkCreate(t *testing.T) {
	for _, n := range []string{"dangling", "reldangling", "chain1", "chain2", "dangling/", "chain1/."} {
		fx := newFixture(t)
		before := fx.snapshot(t)
		_, err := fx.fs.Create(n)
		if !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("Create(%q) = %v, want ErrOutsideRoot", n, err)
		}
		if err := fx.fs.WriteFileAtomic(n+"/x", strings.NewReader("x"), 0); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("WriteFileAtomic(%q/x) = %v, want ErrOutsideRoot", n, err)
		}
		if err := fx.fs.MkdirAll(n+"/sub", 0); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("MkdirAll(%q/sub) = %v, want ErrOutsideRoot", n, err)
		}
		if err := fx.fs.Copy("top.txt", n+"/copy"); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("Copy(top.txt, %q/copy) = %v, want ErrOutsideRoot", n, err)
		}
		if err := fx.fs.Rename("top.txt", n+"/moved"); err == nil {
			t.Errorf("Rename(top.txt, %q/moved) succeeded", n)
		}
		fx.assertOutsideUnchanged(t, before)
		for _, p := range []string{"created", "created-rel", "chained"} {
			if _, err := os.Lstat(filepath.Join(fx.outside, p)); err == nil {
				t.Fatalf("%s created outside", p)
			}
		}
	}
}

// TestF4DeleteThroughLink: deleting a link removes the link only; deleting
// through a link leading out is refused with the same error whether the
// file exists or not.
func TestF4DeleteThroughLink(t *testing.T) {
	fx := newFixture(t)
	before := fx.snapshot(t)
	errExisting := fx.fs.Remove("dirlink/secret.txt")
	errMissing := fx.fs.Remove("dirlink/no-such-file")
	if !errors.Is(errExisting, ErrOutsideRoot) || !errors.Is(errMissing, ErrOutsideRoot) {
		t.Fatalf("remove through link: existing=%v missing=%v, want ErrOutsideRoot for both", errExisting, errMissing)
	}
	if err := fx.fs.RemoveAll(context.Background(), "dirlink/sub"); !errors.Is(err, ErrOutsideRoot) {
		t.Fatalf("RemoveAll(dirlink/sub) = %v", err)
	}
	fx.assertOutsideUnchanged(t, before)
	for _, n := range []string{"dirlink", "filelink", "dangling", "chain1", "loop1"} {
		if err := fx.fs.Remove(n); err != nil {
			t.Fatalf("Remove(%q) = %v, want the link removed", n, err)
		}
	}
	for _, n := range []string{"reldirlink/", "relfilelink"} {
		if err := fx.fs.RemoveAll(context.Background(), n); err != nil {
			t.Fatalf("RemoveAll(%q) = %v", n, err)
		}
		if _, err := os.Lstat(filepath.Join(fx.root, strings.TrimSuffix(n, "/"))); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s still there", n)
		}
	}
	fx.assertOutsideUnchanged(t, before)
}

// TestF5ReadOutsideRoot: nothing outside can be read or listed.
func TestF5ReadOutsideRoot(t *testing.T) {
	fx := newFixture(t)
	for _, n := range []string{"filelink", "dirlink/secret.txt", "relfilelink", "inside/escape/secret.txt", "inside/nested/up/sub/deep.txt", "../outside/secret.txt"} {
		if b, err := fx.fs.ReadFile(n, 0); err == nil || bytes.Contains(b, []byte(secret)) {
			t.Errorf("ReadFile(%q) = %q, %v", n, b, err)
		} else if !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("ReadFile(%q) = %v, want ErrOutsideRoot", n, err)
		}
	}
	if _, err := fx.fs.ReadDir("dirlink"); !errors.Is(err, ErrOutsideRoot) {
		t.Errorf("ReadDir(dirlink) = %v", err)
	}
}

// TestF5InRootLinksKeepWorking: links that stay inside the root work for
// reading, writing, listing and creating.
func TestF5InRootLinksKeepWorking(t *testing.T) {
	fx := newFixture(t)
	f := fx.fs
	if b, err := f.ReadFile("goodfilelink", 0); err != nil || string(b) != "inside data" {
		t.Fatalf("read via goodfilelink: %q %v", b, err)
	}
	if b, err := f.ReadFile("inside/shared", 0); err != nil || string(b) != "top" {
		t.Fatalf("read via relative ../ link: %q %v", b, err)
	}
	if err := f.WriteFileAtomic("goodlink/new.txt", strings.NewReader("new"), 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(fx.root, "inside", "new.txt")); string(b) != "new" {
		t.Fatalf("write via goodlink landed elsewhere: %q", b)
	}
	w, err := f.OpenFile("goodfilelink", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("+"))
	_ = w.Close()
	if b, _ := os.ReadFile(filepath.Join(fx.root, "inside", "file.txt")); string(b) != "inside data+" {
		t.Fatalf("append via link: %q", b)
	}
	if err := f.MkdirAll("goodlink/made/deep", 0); err != nil {
		t.Fatal(err)
	}
	if es, err := f.ReadDir("goodlink/"); err != nil || len(es) == 0 {
		t.Fatalf("list via goodlink: %v %v", es, err)
	}
	// Chmod never follows a final link, even one that stays inside.
	if err := f.Chmod("goodfilelink", 0o600); !errors.Is(err, ErrInvalid) {
		t.Fatalf("chmod of an in-root link = %v, want ErrInvalid", err)
	}
	if fi, _ := os.Stat(filepath.Join(fx.root, "inside", "file.txt")); fi.Mode().Perm() == 0o600 {
		t.Fatalf("chmod followed an in-root link: %v", fi.Mode())
	}
	if err := f.Chmod("goodlink/file.txt", 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(fx.root, "inside", "file.txt")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("chmod below an in-root directory link: %v", fi.Mode())
	}
	if fi, err := f.Stat("goodlink/."); err != nil || !fi.IsDir() {
		t.Fatalf("stat goodlink/.: %v %v", fi, err)
	}
	if err := f.Copy("goodfilelink", "copy.txt"); err != nil {
		t.Fatal(err)
	}
}

// TestF6ChmodChownChtimesDoNotFollow: metadata calls on a link leading out
// leave the outside file's mode, owner and times alone; the L-variants act
// on the link itself.
func TestF6ChmodChownChtimesDoNotFollow(t *testing.T) {
	fx := newFixture(t)
	before := fx.snapshot(t)
	for _, n := range []string{"filelink", "dirlink", "dirlink/secret.txt", "relfilelink"} {
		if err := fx.fs.Chmod(n, 0o777); !errors.Is(err, ErrOutsideRoot) && !errors.Is(err, ErrInvalid) {
			t.Errorf("Chmod(%q) = %v", n, err)
		}
		if err := fx.fs.Chown(n, 1234, 1234); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("Chown(%q) = %v", n, err)
		}
		if err := fx.fs.Chtimes(n, t0, t0); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("Chtimes(%q) = %v", n, err)
		}
	}
	if err := fx.fs.Lchown("filelink", 1234, 1234); err != nil {
		t.Errorf("Lchown(filelink) = %v", err)
	}
	if err := fx.fs.Lchtimes("filelink", t0, t0); err != nil {
		t.Errorf("Lchtimes(filelink) = %v", err)
	}
	if fi, _ := os.Lstat(filepath.Join(fx.root, "filelink")); !fi.ModTime().Equal(t0) {
		t.Errorf("Lchtimes did not change the link: %v", fi.ModTime())
	}
	fx.assertOutsideUnchanged(t, before)
}

// TestF12RootRegressions: the os.Root advisories' inputs.
func TestF12RootRegressions(t *testing.T) {
	fx := newFixture(t)
	before := fx.snapshot(t)
	for _, n := range []string{"../", "..", "../outside", "a/../../b", "dirlink/", "dirlink/.", "filelink/", "filelink/.", "loop1/", "/../../etc/passwd"} {
		f, err := fx.fs.Open(n)
		if err == nil {
			fi, _ := f.Stat()
			_ = f.Close()
			t.Errorf("Open(%q) succeeded: %v", n, fi.Name())
		}
		if _, err := fx.fs.Create(n); err == nil {
			t.Errorf("Create(%q) succeeded", n)
		}
	}
	// An absolute name means the root: "/" is the root itself.
	if fi, err := fx.fs.Stat("/"); err != nil || !fi.IsDir() {
		t.Fatalf("Stat(/) = %v, %v", fi, err)
	}
	if _, err := fx.fs.Stat("/etc/passwd"); !errors.Is(err, ErrNotExist) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat(/etc/passwd) = %v, want not exist inside the root", err)
	}
	fx.assertOutsideUnchanged(t, before)
}

// TestF1WalkAndUsageIgnoreOutside: walkers never follow links, and usage
// counts only what lies inside.
func TestF1WalkAndUsageIgnoreOutside(t *testing.T) {
	fx := newFixture(t)
	var seen []string
	err := fx.fs.Walk("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		seen = append(seen, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range seen {
		if strings.Contains(p, "secret") || strings.Contains(p, "deep") {
			t.Fatalf("walk went outside: %v", seen)
		}
	}
	u, err := fx.fs.RefreshUsage(context.Background())
	if err != nil || u != diskBytes(t, fx.root) {
		t.Fatalf("usage = %d, %v", u, err)
	}
}

func fdCount(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TestF5NoFDLeakOnRejectedLookups: the open descriptor count is the same
// after 1000 rejected lookups of every kind.
func TestF5NoFDLeakOnRejectedLookups(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1, Denylist: []string{"denied.txt"}})
	f := fx.fs
	round := func(i int) {
		n := hostileNames[i%len(hostileNames)]
		_, _ = f.Open("dirlink/secret.txt")
		_, _ = f.Stat(n)
		_, _ = f.ReadFile("inside/nested/up/secret.txt", 0)
		_, _ = f.Create("dangling")
		_, _ = f.OpenFile("chain1", os.O_WRONLY|os.O_CREATE, 0)
		_ = f.MkdirAll("dirlink/x/y", 0)
		_ = f.Remove("dirlink/secret.txt")
		_ = f.Chmod("filelink", 0o777)
		_, _ = f.ReadDir("reldirlink")
		_ = f.Copy("filelink", "c")
		_ = f.WriteFileAtomic("dirlink/w", strings.NewReader("x"), 0)
		_, _ = f.Open("loop1")
		_, _ = f.Open("denied.txt")
		_ = f.Lchtimes("dirlink/secret.txt", t0, t0)
	}
	round(0)
	before := fdCount(t)
	for i := range 1000 {
		round(i)
	}
	if after := fdCount(t); after != before {
		t.Fatalf("open fds: %d before, %d after 1000 rejected lookups", before, after)
	}
}

// TestF7DenylistEveryOperation: a denylisted file can be neither read nor
// changed through any operation, nor reached through an alias link, but
// the trusted view and metadata calls still see it.
func TestF7DenylistEveryOperation(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1, Denylist: []string{"# comment", "", "secret.cfg", "/config/*.yml", "*.jar", "logs/", "!keep.jar"}})
	f := fx.fs
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(fx.root, "config"), 0o755))
	must(os.MkdirAll(filepath.Join(fx.root, "logs"), 0o755))
	must(os.MkdirAll(filepath.Join(fx.root, "other", "config"), 0o755))
	for _, p := range []string{"secret.cfg", "inside/secret.cfg", "config/a.yml", "other/config/a.yml", "plugins.jar", "logs/latest.log", "ok.txt"} {
		must(os.WriteFile(filepath.Join(fx.root, p), []byte("data"), 0o644))
	}
	must(os.Symlink("secret.cfg", filepath.Join(fx.root, "alias")))
	must(os.Symlink("config", filepath.Join(fx.root, "cfgdir")))

	denied := []string{"secret.cfg", "/secret.cfg", "inside/secret.cfg", "config/a.yml", "plugins.jar", "logs", "logs/latest.log", "alias", "cfgdir/a.yml", "new/x.jar"}
	for _, n := range denied {
		if !f.Denied(n) {
			t.Errorf("Denied(%q) = false", n)
		}
		checks := map[string]error{
			"read":        func() error { _, err := f.ReadFile(n, 0); return err }(),
			"open":        func() error { _, err := f.Open(n); return err }(),
			"create":      func() error { _, err := f.Create(n); return err }(),
			"atomic":      f.WriteFileAtomic(n, strings.NewReader("x"), 0),
			"mkdir":       f.MkdirAll(n, 0),
			"rename-from": f.Rename(n, "moved"),
			"rename-to":   f.Rename("ok.txt", n),
			"copy-from":   f.Copy(n, "copy"),
			"copy-to":     f.Copy("ok.txt", n),
			"remove":      f.Remove(n),
			"removeall":   f.RemoveAll(context.Background(), n),
			"chmod":       f.Chmod(n, 0o600),
			"chown":       f.Lchown(n, 1, 1),
			"chtimes":     f.Chtimes(n, t0, t0),
			"symlink":     f.Symlink("x", n),
		}
		for what, err := range checks {
			if !errors.Is(err, ErrDenied) || !errors.Is(err, fs.ErrPermission) {
				t.Errorf("%s %q = %v, want ErrDenied", what, n, err)
			}
		}
	}
	for _, n := range []string{"ok.txt", "other/config/a.yml", "keep.jar", "inside/keep.jar"} {
		if f.Denied(n) {
			t.Errorf("Denied(%q) = true", n)
		}
	}
	if _, err := f.ReadFile("other/config/a.yml", 0); err != nil {
		t.Errorf("anchored pattern matched below the root: %v", err)
	}
	if _, err := f.Stat("secret.cfg"); err != nil {
		t.Errorf("stat of a denied file should work (listing): %v", err)
	}
	if b, err := f.Trusted().ReadFile("secret.cfg", 0); err != nil || string(b) != "data" {
		t.Errorf("trusted view read: %q %v", b, err)
	}
	if f.Trusted().Denied("secret.cfg") {
		t.Error("trusted view denies")
	}
	f.SetDenylist(nil)
	if _, err := f.ReadFile("secret.cfg", 0); err != nil {
		t.Errorf("after SetDenylist(nil): %v", err)
	}
}

// TestF10F11DiskLimit: writes are counted while streaming, in blocks;
// crossing the limit fails mid-write with ErrNoSpace, WriteFileAtomic
// leaves nothing, and -1 refuses every write.
func TestF10F11DiskLimit(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1})
	f := fx.fs
	base, _ := f.RefreshUsage(context.Background())
	f.SetDiskLimit(base + 100*1024)
	w, err := f.Create("a.bin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 60*1024)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 60*1024)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("second write = %v, want ErrNoSpace", err)
	}
	_ = w.Close()
	if u := f.Usage(); u != base+60*1024 {
		t.Fatalf("usage %d, want %d", u, base+60*1024)
	}
	// Atomic write crossing the limit mid-stream: nothing left behind.
	r := io.MultiReader(bytes.NewReader(make([]byte, 30*1024)), bytes.NewReader(make([]byte, 30*1024)))
	if err := f.WriteFileAtomic("b.bin", r, 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("WriteFileAtomic = %v, want ErrNoSpace", err)
	}
	if es, _ := os.ReadDir(fx.root); hasPrefix(es, "b.bin") || hasPrefix(es, ".b.bin") {
		t.Fatalf("partial file left: %v", es)
	}
	if u := f.Usage(); u != base+60*1024 {
		t.Fatalf("usage after failed atomic write %d, want %d", u, base+60*1024)
	}
	if err := f.Copy("a.bin", "copy.bin"); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("copy over the limit = %v", err)
	}
	// Replacing a file counts the difference (10 bytes take one block).
	if err := f.WriteFileAtomic("a.bin", bytes.NewReader(make([]byte, 10)), 0); err != nil {
		t.Fatal(err)
	}
	if u := f.Usage(); u != base+blockSize {
		t.Fatalf("usage after replace %d, want %d", u, base+blockSize)
	}
	if err := f.HasSpaceFor(100*1024 - blockSize + 1); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("HasSpaceFor over the limit = %v", err)
	}
	if err := f.Remove("a.bin"); err != nil || f.Usage() != base {
		t.Fatalf("remove: %v usage %d, want %d", err, f.Usage(), base)
	}
	if u, _ := f.RefreshUsage(context.Background()); u != base {
		t.Fatalf("walk after all that: %d, want %d", u, base)
	}
	f.SetDiskLimit(-1)
	if _, err := f.Create("c"); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Create with -1 = %v", err)
	}
	if err := f.MkdirAll("d", 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Mkdir with -1 = %v", err)
	}
	if err := f.WriteFileAtomic("e", strings.NewReader(""), 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("WriteFileAtomic with -1 = %v", err)
	}
	if err := f.HasSpaceFor(0); !errors.Is(err, ErrNoSpace) {
		t.Fatal("HasSpaceFor with -1")
	}
	f.SetDiskLimit(0)
	if err := f.WriteFileAtomic("big", bytes.NewReader(make([]byte, 1000)), 0); err != nil {
		t.Fatalf("unlimited: %v", err)
	}
}

func hasPrefix(es []fs.DirEntry, p string) bool {
	for _, e := range es {
		if strings.HasPrefix(e.Name(), p) {
			return true
		}
	}
	return false
}

// TestOpenEntryStaysInside: opening entries through the walk's directory
// descriptors reads the same files as Open, never reaches outside through a
// link, honours the denylist, and after a file is swapped for a link
// leading out, opens nothing outside.
func TestOpenEntryStaysInside(t *testing.T) {
	fx := newFixture(t, Options{UID: -1, GID: -1, Denylist: []string{"top.txt"}})
	if err := os.WriteFile(filepath.Join(fx.root, "inside/nested/ok.txt"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	read := map[string]string{}
	err := fx.fs.Walk("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		p = strings.TrimPrefix(p, "/")
		if p == "inside/file.txt" { // swapped for a link out after the listing
			if err := os.Remove(filepath.Join(fx.root, p)); err != nil {
				return err
			}
			if err := os.Symlink(filepath.Join(fx.outside, "secret.txt"), filepath.Join(fx.root, p)); err != nil {
				return err
			}
		}
		f, err := fx.fs.OpenEntry(p, d)
		if err != nil {
			read[p] = "error"
			return nil
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil {
			return err
		}
		read[p] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, content := range read {
		if strings.Contains(content, secret) {
			t.Errorf("%s read a file outside the root", p)
		}
	}
	if read["top.txt"] != "error" {
		t.Errorf("denylisted top.txt opened: %q", read["top.txt"])
	}
	if read["inside/file.txt"] != "error" {
		t.Errorf("file swapped for a link out: read %q", read["inside/file.txt"])
	}
	if read["inside/nested/ok.txt"] != "ok" || len(read) != 3 {
		t.Errorf("regular files read: %v, want top.txt, inside/file.txt and inside/nested/ok.txt", read)
	}
	// An entry from elsewhere falls back to opening by name.
	f, err := fx.fs.Trusted().OpenEntry("top.txt", nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// ReadHead reads the entry itself: a link (even one swapped in for a file)
// is not followed, and a FIFO does not block.
func TestReadHeadNeverFollowsOrBlocks(t *testing.T) {
	fx := newFixture(t)
	if err := syscall.Mkfifo(filepath.Join(fx.root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fx.root, "plain.txt"), []byte("plain head"), 0o644); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	seen := map[string]bool{}
	err := fx.fs.Walk(".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && rel != "." {
			return fs.SkipDir
		}
		switch rel {
		case "plain.txt":
			n, err := fx.fs.ReadHead(rel, d, buf)
			if err != nil || string(buf[:n]) != "plain head" {
				t.Errorf("plain: %q %v", buf[:n], err)
			}
		case "filelink", "fifo":
			if rel == "filelink" {
				// swap: whatever it was listed as, it is a link now
				if n, err := fx.fs.ReadHead(rel, d, buf); err == nil {
					t.Errorf("ReadHead(filelink) read %q through the link", buf[:n])
				}
			} else {
				done := make(chan struct{})
				go func() { _, _ = fx.fs.ReadHead(rel, d, buf); close(done) }()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("ReadHead blocked on a FIFO")
				}
			}
		}
		seen[rel] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !seen["plain.txt"] || !seen["filelink"] || !seen["fifo"] {
		t.Fatalf("walk saw %v", seen)
	}
}

// A regular file swapped for a FIFO between the listing and OpenEntry does
// not hold the walk (a backup of a running server must never hang on one).
func TestOpenEntryNeverBlocksOnAFIFO(t *testing.T) {
	fx := newFixture(t)
	p := filepath.Join(fx.root, "inside", "file.txt")
	err := fx.fs.Walk("inside", func(rel string, d fs.DirEntry, err error) error {
		if err != nil || rel != "inside/file.txt" {
			return err
		}
		if err := os.Remove(p); err != nil {
			return err
		}
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			return err
		}
		done := make(chan struct{})
		go func() {
			if f, err := fx.fs.OpenEntry(rel, d); err == nil {
				_ = f.Close()
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("OpenEntry blocked on a FIFO")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A FIFO opened for writing (with or without a reader at the other end,
// truncating or not) answers ErrNotRegular at once: nothing waits for a
// reader and nothing is written into the pipe.
func TestOpenFileForWritingRefusesAFIFO(t *testing.T) {
	fx := newFixture(t)
	p := filepath.Join(fx.root, "pipe")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, reader := range []bool{false, true} {
		if reader {
			r, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
		}
		for _, flag := range []int{os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_CREATE | os.O_TRUNC, os.O_WRONLY | os.O_APPEND} {
			done := make(chan error, 1)
			go func() {
				f, err := fx.fs.OpenFile("pipe", flag, 0)
				if err == nil {
					_ = f.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, ErrNotRegular) {
					t.Fatalf("open flag %#x (reader %v): %v, want ErrNotRegular", flag, reader, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("open flag %#x (reader %v) blocked on a FIFO", flag, reader)
			}
		}
	}
}

// ReadFile of a FIFO whose writer stays silent (a game holding it open)
// answers ErrNotRegular at once instead of waiting for bytes.
func TestReadFileRefusesAFIFO(t *testing.T) {
	fx := newFixture(t)
	p := filepath.Join(fx.root, "pipe")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	// O_RDWR: a writer that never writes, opened without waiting for a reader.
	w, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	done := make(chan error, 1)
	go func() {
		_, err := fx.fs.ReadFile("pipe", 1<<20)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) {
			t.Fatalf("ReadFile of a FIFO: %v, want ErrNotRegular", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFile blocked on a FIFO")
	}
}
