package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// A DirStack never enters a link: without create, a link on the way is
// ErrNotDir; with create, it is removed (Removed is told) and replaced by
// a directory inside the root, and outside stays as it was.
func TestDirStackNeverEntersALink(t *testing.T) {
	fx := newFixture(t)
	before := fx.snapshot(t)
	st, err := fx.fs.Trusted().NewDirStack()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, dir := range []string{"dirlink/x", "reldirlink", "inside/escape/y", "goodlink/nested"} {
		if _, err := st.Enter(dir, false); !errors.Is(err, ErrNotDir) {
			t.Errorf("Enter(%s, false) = %v, want ErrNotDir", dir, err)
		}
	}
	var removed []string
	st.Removed = func(rel string) { removed = append(removed, rel) }
	d, err := st.Enter("inside/escape/y", true)
	if err != nil {
		t.Fatal(err)
	}
	f, err := d.Create("made", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	fx.assertOutsideUnchanged(t, before)
	if len(removed) != 1 || removed[0] != "inside/escape" {
		t.Errorf("Removed told of %v, want [inside/escape]", removed)
	}
	if _, err := os.Lstat(filepath.Join(fx.root, "inside", "escape", "y", "made")); err != nil {
		t.Errorf("the file is not inside the root: %v", err)
	}
}

// After Leave(dir) nothing at or below dir is held: a tree removed and
// made again is entered anew, not through handles on the removed one.
func TestDirStackLeaveLetsGoOfARemovedTree(t *testing.T) {
	fx := newFixture(t)
	st, err := fx.fs.Trusted().NewDirStack()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Enter("a/b/c", true); err != nil {
		t.Fatal(err)
	}
	st.Leave("a/b")
	if err := os.RemoveAll(filepath.Join(fx.root, "a", "b")); err != nil {
		t.Fatal(err)
	}
	d, err := st.Enter("a/b/c", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Mkdir("new", 0); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(fx.root, "a", "b", "c", "new")); err != nil || !fi.IsDir() {
		t.Fatalf("made in a removed directory, not at a/b/c/new: %v", err)
	}
	if _, err := st.Enter("a/missing", false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Enter of a missing directory = %v, want ErrNotExist", err)
	}
}
