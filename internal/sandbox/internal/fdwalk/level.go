package fdwalk

import (
	"errors"
	"slices"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Held is how many directories from the start of a walk keep their
// descriptor open while their subtrees are walked. A deeper directory's
// descriptor is closed before the walk descends into one of its
// subdirectories and reopened through the subdirectory's ".." afterwards,
// so a walk holds at most Held+2 descriptors however deep the tree (a game
// process can make one thousands of levels deep) and reopens nothing in
// trees of ordinary depth.
const Held = 16

// Level is one directory of a walk, linked to its parent: the stack of a
// walk from its start down to where it is. It holds the directory's
// descriptor (-1 while closed) and the identity it had when the walk first
// opened it, so that a descriptor reopened later is known to be the same
// directory.
type Level struct {
	fd    int
	id    Inode
	known bool          // id is known (Open, Start; Adopt learns it on closing)
	ctime unix.Timespec // when opened by Open: to tell a listing ahead is still current
	name  string        // its name in its parent (for reopening by name)
	up    *Level        // its parent; nil at the start of the walk

	// Memo is the caller's, computed once per directory of a walk (the
	// sandbox's "denied" verdict): 0 while unknown.
	Memo atomic.Int32
}

// Start makes the level where a walk starts of fd (owned by the level
// from now on), whose identity the caller checked to be id.
func Start(fd int, id Inode) *Level { return &Level{fd: fd, id: id, known: true} }

// Adopt makes the level of fd, the directory name of parent opened by the
// caller (with its own checks), owned by the level from now on. Its
// identity is learnt when a Stack closes it.
func Adopt(parent *Level, name string, fd int) *Level {
	return &Level{fd: fd, name: name, up: parent}
}

// FD is the level's descriptor, -1 while closed.
func (l *Level) FD() int { return l.fd }

// ID is the identity the directory had when the walk opened it.
func (l *Level) ID() Inode { return l.id }

// Up is the level's parent, nil at the start of the walk.
func (l *Level) Up() *Level { return l.up }

// Close closes the level's descriptor, if open.
func (l *Level) Close() {
	if l.fd >= 0 {
		_ = unix.Close(l.fd)
		l.fd = -1
	}
}

// Open opens the directory name of parent without following a link,
// and checks that it is the directory the listing saw (want): a directory
// swapped for another one after the listing is ErrSwapped.
func Open(parent *Level, name string, want Inode) (*Level, error) {
	fd, err := Openat(parent.fd, name, DirFlags)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || (Inode{uint64(st.Dev), st.Ino}) != want {
		_ = unix.Close(fd)
		if err != nil {
			return nil, err
		}
		return nil, ErrSwapped
	}
	return &Level{fd: fd, id: want, known: true, ctime: st.Ctim, name: name, up: parent}, nil
}

// ReopenParent opens again the closed parent of l, which is open: through
// l's ".." (one system call whatever the depth) when that is still the
// same directory, else (l was moved meanwhile) by name from the nearest
// open ancestor, checking every directory on the way (ErrMoved when one
// of them was moved or removed: the walk can then not tell what it has
// covered).
func ReopenParent(l *Level) error {
	if reopenUp(l) {
		return nil
	}
	return reopenByName(l.up)
}

// reopenUp opens again the closed parent of l, which is open, through l's
// "..", when that is still the same directory.
func reopenUp(l *Level) bool {
	p := l.up
	if !p.known {
		return false
	}
	fd, err := Openat(l.fd, "..", DirFlags)
	if err != nil {
		return false
	}
	if id, err := FdInode(fd); err == nil && id == p.id {
		p.fd = fd
		return true
	}
	_ = unix.Close(fd)
	return false
}

// reopenByName opens l again from its nearest open ancestor, one name at
// a time, never following a link, each directory checked against the
// identity it had.
func reopenByName(l *Level) error {
	var chain []*Level
	for a := l; a.fd < 0; a = a.up {
		if a.up == nil {
			return ErrMoved
		}
		chain = append(chain, a)
	}
	for i := len(chain) - 1; i >= 0; i-- {
		a := chain[i]
		fd, err := Openat(a.up.fd, a.name, DirFlags)
		if err == nil {
			var id Inode
			if id, err = FdInode(fd); err == nil && (id != a.id || !a.known) {
				err = ErrMoved
			}
			if err != nil {
				_ = unix.Close(fd)
			}
		}
		if i < len(chain)-1 {
			a.up.Close() // an intermediate level: closed again
		}
		if err != nil {
			return err
		}
		a.fd = fd
	}
	return nil
}

// List reads every entry of the open directory l and lstat-s each one
// relative to it, sorted by name. An entry removed between the two is left
// out (it vanished); any other failure is returned with the name of the
// entry that could not be read ("" for the directory itself).
func List(l *Level, buf []byte) ([]*Entry, string, error) {
	return listFD(l.fd, buf)
}

func listFD(fd int, buf []byte) ([]*Entry, string, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, "", err
	}
	var names []string
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		if n <= 0 {
			break
		}
		names = AppendNames(names, buf[:n])
	}
	slices.Sort(names)
	// One allocation for the entries, one for the names' C strings: not
	// one each (a server has tens of thousands).
	slab := make([]Entry, len(names))
	out := make([]*Entry, 0, len(names))
	cname := new([unix.NAME_MAX + 1]byte)
	for i, name := range names {
		e := &slab[i]
		e.Base = name
		err := LstatAt(fd, name, cname, &e.St)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return nil, name, err
		}
		out = append(out, e)
	}
	return out, "", nil
}
