package sandbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// setUmaskForTest is SetUmask for one test: the process's umask and what
// the sandbox knows of it are restored after.
func setUmaskForTest(t *testing.T, mask fs.FileMode) {
	t.Helper()
	old := syscall.Umask(0)
	syscall.Umask(old)
	known := knownUmask.Load()
	SetUmask(mask)
	t.Cleanup(func() {
		syscall.Umask(old)
		knownUmask.Store(known)
	})
}

// TestSetUmaskModes: with the umask known, entries get exactly the asked
// mode whether or not the umask narrows it (the chmod is skipped only when
// it does not), through Create, Mkdir and MkdirAll.
func TestSetUmaskModes(t *testing.T) {
	for _, mask := range []fs.FileMode{0o022, 0, 0o077} {
		t.Run(mask.String(), func(t *testing.T) {
			setUmaskForTest(t, mask)
			fx := newFixture(t, Options{UID: -1, GID: -1})
			d := mustOpenDir(t, fx.fs, "/")
			for _, perm := range []fs.FileMode{0o644, 0o666, 0o600, 0o755} {
				name := "f" + perm.String()
				w, err := d.Create(name, perm)
				if err != nil {
					t.Fatal(err)
				}
				_ = w.Close()
				if fi, err := os.Lstat(filepath.Join(fx.root, name)); err != nil || fi.Mode().Perm() != perm {
					t.Errorf("Create(%v) under umask %v: %v, %v", perm, mask, fi.Mode(), err)
				}
				dn := "d" + perm.String()
				if err := d.Mkdir(dn, perm|0o700); err != nil {
					t.Fatal(err)
				}
				if fi, err := os.Lstat(filepath.Join(fx.root, dn)); err != nil || fi.Mode().Perm() != perm|0o700 {
					t.Errorf("Mkdir(%v) under umask %v: %v, %v", perm|0o700, mask, fi.Mode(), err)
				}
			}
			if err := fx.fs.MkdirAll("a/b", 0o777); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Lstat(filepath.Join(fx.root, "a", "b")); err != nil || fi.Mode().Perm() != 0o777 {
				t.Errorf("MkdirAll(0777) under umask %v: %v, %v", mask, fi.Mode(), err)
			}
		})
	}
}
