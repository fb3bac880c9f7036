package sandbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// ControlEntry hands fn the listed inode only: an entry swapped between the
// listing and the call, for a link out of the root or a FIFO, is refused
// without blocking and without fn (the quota walk must never tag a host
// file or hang on a pipe).
func TestControlEntryOnlyTheListedInode(t *testing.T) {
	fx := newFixture(t)
	target := filepath.Join(fx.outside, "victim")
	if err := os.WriteFile(target, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	swaps := map[string]func(p string) error{
		"inside/a.txt": func(p string) error { return os.Symlink(target, p) },
		"inside/b.txt": func(p string) error { return syscall.Mkfifo(p, 0o644) },
	}
	for rel := range swaps {
		if err := os.WriteFile(filepath.Join(fx.root, rel), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var called []string
	var kept int
	err := fx.fs.Walk("inside", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		swap, ok := swaps[rel]
		if !ok {
			if d.Type().IsRegular() {
				kept++
				if err := fx.fs.ControlEntry(rel, d, func(int) error { return nil }); err != nil {
					t.Errorf("%s, not swapped: %v", rel, err)
				}
			}
			return nil
		}
		p := filepath.Join(fx.root, rel)
		if err := os.Remove(p); err != nil {
			return err
		}
		if err := swap(p); err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() {
			done <- fx.fs.ControlEntry(rel, d, func(int) error { called = append(called, rel); return nil })
		}()
		select {
		case err := <-done:
			if !Vanished(err) {
				t.Errorf("%s swapped: error %v, want one Vanished accepts", rel, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("ControlEntry blocked on %s", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(called) != 0 {
		t.Errorf("fn ran for swapped entries %v", called)
	}
	if kept == 0 {
		t.Error("control: no entry was left as listed")
	}
}
