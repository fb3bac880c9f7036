package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"strings"

	"github.com/wharf/wharf/internal/sandbox/internal/fdwalk"
)

// MaxHeld bounds the directory descriptors a DirStack holds (the root
// included), so that a tree thousands of levels deep cannot exhaust the
// process's descriptors.
const MaxHeld = 64

// DirStack holds open the directories from the root down to the parent of
// the entry being written, so that an entry costs one system call per new
// name instead of a walk from the root: archives and live streams send a
// directory's entries after it, depth first, and consecutive entries share
// most of their path. The directories are an fdwalk.Stack (the stack the
// walks use too) that keeps at most MaxHeld open: the root and the deepest
// ones; a closed level is reopened through the ".." of its open child,
// checked to be the same directory, or else by name from the root. Every
// level is opened by one name relative to its parent, never through a
// symbolic link; DirStack adds the policy: the names and the denylist of
// each level (its Dir), Check, and the making of missing directories.
type DirStack struct {
	// Check, when set, is asked before the directory rel is entered or
	// made; its error stops Enter (an archive's own links are refused).
	Check func(rel string) error
	// Removed, when set, is told of a file or link at rel removed to make
	// way for a directory.
	Removed func(rel string)

	fsys  *FS
	stack *fdwalk.Stack
	dirs  []*Dir // dirs[i] is the stack's level i as a Dir, borrowing its descriptor
}

// NewDirStack opens the root of f as the bottom of a DirStack.
func (f *FS) NewDirStack() (*DirStack, error) {
	const op = "opendir"
	rc, err := f.s.rootDir.SyscallConn()
	if err != nil {
		return nil, wrap(op, ".", err)
	}
	fd, oerr := -1, error(nil)
	if err := rc.Control(func(rootfd uintptr) { fd, oerr = fdwalk.Openat(int(rootfd), ".", fdwalk.DirFlags) }); err != nil {
		return nil, closedErr(op, ".", err)
	}
	if oerr != nil {
		return nil, wrap(op, ".", oerr)
	}
	st := &DirStack{fsys: f, stack: fdwalk.NewStack(fdwalk.Adopt(nil, ".", fd), 1, MaxHeld-1)}
	st.dirs = []*Dir{st.dirOf(st.stack.Top(), ".")}
	return st, nil
}

// dirOf is the Dir of the level l, at rel: it borrows l's descriptor (its
// Close does nothing). Like every Dir of an untrusted view, it knows the
// name the kernel gives the directory, for the denylist.
func (st *DirStack) dirOf(l *fdwalk.Level, rel string) *Dir {
	d := &Dir{fsys: st.fsys, rc: levelConn{l}, rel: rel}
	st.readReal(d)
	return d
}

// readReal reads again the name the kernel gives d's directory (after it
// was reopened: it may have been renamed meanwhile).
func (st *DirStack) readReal(d *Dir) {
	if st.fsys.trusted {
		return
	}
	d.real = ""
	_ = d.rc.Control(func(fd uintptr) {
		if real, ok := st.fsys.s.fdRelFD(int(fd)); ok {
			d.real = real
		}
	})
}

// Close closes every held directory.
func (st *DirStack) Close() {
	st.stack.Close()
	st.dirs = nil
}

// Leave closes the held levels at dir or below it (cleaned; "." leaves all
// but the root): to be called before dir is removed or replaced, since a
// handle on a removed directory would write where no path leads.
func (st *DirStack) Leave(dir string) {
	k := len(st.dirs) - 1
	for k > 0 && within(dir, st.dirs[k].rel) {
		k--
	}
	st.popTo(k)
}

// within reports whether rel is dir or lies below it.
func within(dir, rel string) bool {
	if dir == "." {
		return true
	}
	return rel == dir || (strings.HasPrefix(rel, dir) && len(rel) > len(dir) && rel[len(dir)] == '/')
}

// popTo closes the levels above k.
func (st *DirStack) popTo(k int) {
	st.stack.PopTo(k)
	clear(st.dirs[k+1:])
	st.dirs = st.dirs[:k+1]
}

// Enter returns the open directory dir (cleaned; "." is the root), making
// the missing directories on the way when create is set. A link or a
// non-directory in the way is then removed and replaced by a directory
// (never followed). Without create, a missing directory is ErrNotExist and
// anything else in the way ErrNotDir. The Dir stays owned by the stack:
// valid until the next Enter, Leave or Close.
func (st *DirStack) Enter(dir string, create bool) (*Dir, error) {
	k := len(st.dirs) - 1
	for k > 0 && !within(st.dirs[k].rel, dir) {
		k--
	}
	st.reopen(k)
	for dir != st.dirs[len(st.dirs)-1].rel {
		top := st.dirs[len(st.dirs)-1]
		rest := dir
		if top.rel != "." {
			rest = dir[len(top.rel)+1:]
		}
		end := len(dir) - len(rest) + strings.IndexByte(rest+"/", '/')
		if err := st.down(top, dir[:end], create); err != nil {
			return nil, err
		}
	}
	return st.dirs[len(st.dirs)-1], nil
}

// reopen makes level k the open top of the stack: through the ".." of
// the shallowest open level above it while those are the same
// directories, else from the root by name (Enter walks down, without
// creating).
func (st *DirStack) reopen(k int) {
	if k == 0 || st.stack.At(k).FD() >= 0 {
		st.popTo(k)
		return
	}
	if st.stack.ReopenAt(k) {
		st.popTo(k)
		st.readReal(st.dirs[k])
		return
	}
	// Moved meanwhile: start again from the root; Enter walks down by name.
	st.popTo(0)
}

// down opens (making it when create is set) the entry rel of top, a
// single name below it, and pushes it.
func (st *DirStack) down(top *Dir, rel string, create bool) error {
	base := rel[strings.LastIndexByte(rel, '/')+1:]
	if st.Check != nil {
		if err := st.Check(rel); err != nil {
			return err
		}
	}
	fd, _, err := top.subFD(base)
	if err != nil && create {
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case errors.Is(err, ErrNotDir):
			// A file or link in the way (a link is removed, not followed).
			if err = top.Remove(base); err == nil && st.Removed != nil {
				st.Removed(rel)
			}
		}
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			if err = top.Mkdir(base, 0o755); err == nil || errors.Is(err, fs.ErrExist) {
				fd, _, err = top.subFD(base)
			}
		}
	}
	if err != nil {
		return err
	}
	l := fdwalk.Adopt(st.stack.Top(), base, fd)
	d := st.dirOf(l, rel)
	st.stack.Push(l)
	st.dirs = append(st.dirs, d)
	return nil
}

// levelConn is the syscall.RawConn of a Dir that borrows the descriptor
// of a stack's level: while the level is closed, operations fail as on a
// closed file.
type levelConn struct{ l *fdwalk.Level }

func (c levelConn) Control(f func(fd uintptr)) error {
	fd := c.l.FD()
	if fd < 0 {
		return os.ErrClosed
	}
	f(uintptr(fd))
	return nil
}

func (c levelConn) Read(func(fd uintptr) bool) error  { return errors.ErrUnsupported }
func (c levelConn) Write(func(fd uintptr) bool) error { return errors.ErrUnsupported }
