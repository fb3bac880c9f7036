package fdwalk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// deepStack pushes the directories d0/d1/…/d(n-1) of root onto a stack
// keeping shallow and deep levels open.
func deepStack(t *testing.T, root string, n, shallow, deep int) *Stack {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, strings.Repeat("d/", n)), 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(root, DirFlags, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := FdInode(fd)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStack(Start(fd, id), shallow, deep)
	for range n {
		sub, err := Openat(s.Top().FD(), "d", DirFlags)
		if err != nil {
			t.Fatal(err)
		}
		s.Push(Adopt(s.Top(), "d", sub))
	}
	t.Cleanup(s.Close)
	return s
}

func openLevels(s *Stack) (open []int) {
	for i := range s.Len() {
		if s.At(i).FD() >= 0 {
			open = append(open, i)
		}
	}
	return open
}

// A stack keeps open its first shallow levels and its last deep ones,
// whatever its depth.
func TestStackHoldsItsBounds(t *testing.T) {
	s := deepStack(t, t.TempDir(), 40, 3, 5)
	if got := openLevels(s); len(got) != 3+5 || got[2] != 2 || got[3] != 36 {
		t.Fatalf("open levels %v, want 0-2 and 36-40", got)
	}
	// Popping walks back up, reopening each parent through "..".
	for s.Len() > 1 {
		if err := s.Pop(); err != nil {
			t.Fatalf("pop at %d: %v", s.Len(), err)
		}
		if s.Top().FD() < 0 {
			t.Fatalf("the top at %d is closed", s.Len())
		}
		if n := len(openLevels(s)); n > 3+5 {
			t.Fatalf("%d levels open at %d", n, s.Len())
		}
	}
}

// A closed level is reopened through its child's ".." only while it is the
// same directory: one swapped for another is not (ReopenAt false), and
// Pop then reopens by name only what is still the directory it was.
func TestStackReopensThroughDotDotOnlyTheSameDirectory(t *testing.T) {
	root := t.TempDir()
	s := deepStack(t, root, 6, 1, 2)
	// Levels 1-4 are closed; 5 (root/d/d/d/d/d) and 6 are open.
	if got := openLevels(s); len(got) != 3 || got[1] != 5 {
		t.Fatalf("open levels %v", got)
	}
	if !s.ReopenAt(3) || s.At(3).FD() < 0 {
		t.Fatal("ReopenAt through \"..\" of unchanged directories failed")
	}
	s.PopTo(3)
	// Level 2 (root/d/d) is closed: swap it for another directory, its
	// child (level 3) moved into the new one.
	for range 2 {
		sub, err := Openat(s.Top().FD(), "d", DirFlags)
		if err != nil {
			t.Fatal(err)
		}
		s.Push(Adopt(s.Top(), "d", sub))
	}
	if s.At(3).FD() >= 0 || s.At(2).FD() >= 0 {
		t.Fatalf("open levels %v", openLevels(s))
	}
	d2 := filepath.Join(root, "d", "d")
	if err := os.Rename(d2, d2+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(d2, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(d2+".old", "d"), filepath.Join(d2, "d")); err != nil {
		t.Fatal(err)
	}
	if s.ReopenAt(2) {
		t.Fatal("ReopenAt reopened a directory swapped for another one through \"..\"")
	}
	// Level 3, the moved directory, was reopened on the way (it is the
	// same). Popping it back to the swapped level 2 goes the walk's way:
	// "..", then by name, checking identities: the swapped level is refused.
	s.PopTo(3)
	if s.At(3).FD() < 0 || s.At(2).FD() >= 0 {
		t.Fatalf("open levels %v", openLevels(s))
	}
	if err := s.Pop(); err != ErrMoved {
		t.Fatalf("Pop over a swapped directory: %v, want ErrMoved", err)
	}
}
