package sandbox

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestResolveAgreesWithWalk: the cheap resolution (parent opened once, its
// real name read from the descriptor) finds the same name as the
// component-by-component walk, for every kind of link in the fixture and
// names below them, or leaves the decision to the walk.
func TestResolveAgreesWithWalk(t *testing.T) {
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
	must(syscall.Mkfifo(filepath.Join(fx.root, "fifo"), 0o644))
	names := []string{
		"top.txt", "inside/file.txt", "inside/new.txt", "missing/new.txt",
		"cfgdir/a.yml", "cfgdir/sub/a.yml", "inside/tosub/a.yml", "twohops/a.yml",
		"goodlink/file.txt", "goodlink/nested/x", "goodfilelink", "inside/shared",
		"dirlink/secret.txt", "reldirlink/secret.txt", "inside/escape/x", "inside/nested/up/x",
		"loop1/x", "selfloop/x", "dangling", "chain1", "fifo/x", "top.txt/x",
	}
	for _, n := range names {
		want, wok := fx.fs.s.resolveInRoot(n)
		got, ok := fx.fs.s.resolve(n)
		if ok != wok || got != want {
			t.Errorf("resolve(%q) = %q %v, walk gives %q %v", n, got, ok, want, wok)
		}
	}
	if got, ok := fx.fs.s.resolveParent("cfgdir/sub/a.yml"); !ok || got != "config/sub/a.yml" {
		t.Errorf("fast path not taken for a linked parent: %q %v", got, ok)
	}
}
