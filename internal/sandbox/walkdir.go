package sandbox

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/usererr"
)

// heldLevels is how many directories from the start of a walk keep their
// descriptor open while their subtrees are walked. A deeper directory's
// descriptor is closed before the walk descends into one of its
// subdirectories and reopened through the subdirectory's ".." afterwards,
// so a walk holds at most heldLevels+2 descriptors however deep the tree
// (a game process can make one thousands of levels deep) and reopens
// nothing in trees of ordinary depth.
const heldLevels = 16

// level is one directory of a walk: its descriptor (-1 while closed) and
// the identity it had when the walk first opened it, so that a descriptor
// reopened later is known to be the same directory.
type level struct {
	fd    int
	id    inode
	ctime unix.Timespec // when opened by openLevel: to tell a listing ahead is still current
	name  string        // its name in its parent (for reopening by name)
	up    *level        // its parent; nil at the start of the walk

	denied atomic.Int32 // see deniedDir: 0 not known yet, 1 no, 2 yes
}

func (l *level) close() {
	if l.fd >= 0 {
		_ = unix.Close(l.fd)
		l.fd = -1
	}
}

const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK

// openLevel opens the directory name of parent without following a link,
// and checks that it is the directory the listing saw (want): a directory
// swapped for another one after the listing is ErrOutsideRoot.
func openLevel(parent *level, name string, want inode) (*level, error) {
	fd, err := openat(parent.fd, name, dirFlags)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || (inode{uint64(st.Dev), st.Ino}) != want {
		_ = unix.Close(fd)
		if err != nil {
			return nil, err
		}
		return nil, ErrOutsideRoot
	}
	return &level{fd: fd, id: want, ctime: st.Ctim, name: name, up: parent}, nil
}

// reopenParent opens again the closed parent of l, which is open: through
// l's ".." (one system call whatever the depth) when that is still the
// same directory, else (l was moved meanwhile) by name from the nearest
// open ancestor, checking every directory on the way.
func reopenParent(l *level) error {
	p := l.up
	if fd, err := openat(l.fd, "..", dirFlags); err == nil {
		if id, err := fdInode(fd); err == nil && id == p.id {
			p.fd = fd
			return nil
		}
		_ = unix.Close(fd)
	}
	return reopenByName(p)
}

// reopenByName opens l again from its nearest open ancestor, one name at
// a time, never following a link, each directory checked against the
// identity it had. It fails (ErrNotExist) when one of them was moved or
// removed: the walk can then not tell what it has covered.
func reopenByName(l *level) error {
	var chain []*level
	for a := l; a.fd < 0; a = a.up {
		if a.up == nil {
			return ErrNotExist
		}
		chain = append(chain, a)
	}
	for i := len(chain) - 1; i >= 0; i-- {
		a := chain[i]
		fd, err := openat(a.up.fd, a.name, dirFlags)
		if err == nil {
			var id inode
			if id, err = fdInode(fd); err == nil && id != a.id {
				err = ErrNotExist
			}
			if err != nil {
				_ = unix.Close(fd)
			}
		}
		if i < len(chain)-1 {
			a.up.close() // an intermediate level: closed again
		}
		if err != nil {
			return err
		}
		a.fd = fd
	}
	return nil
}

func openat(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func fdInode(fd int) (inode, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return inode{}, err
	}
	return inode{uint64(st.Dev), st.Ino}, nil
}

// listLevel reads every entry of the open directory l and lstat-s each one
// relative to it, sorted by name. An entry removed between the two is left
// out (it vanished); any other failure is returned with the name of the
// entry that could not be read ("" for the directory itself).
func listLevel(l *level, buf []byte) ([]*statEntry, string, error) {
	if _, err := unix.Seek(l.fd, 0, 0); err != nil {
		return nil, "", err
	}
	var names []string
	for {
		n, err := unix.ReadDirent(l.fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		if n <= 0 {
			break
		}
		names = appendDirentNames(names, buf[:n])
	}
	slices.Sort(names)
	// One allocation for the entries, one for the names' C strings: not
	// one each (a server has tens of thousands).
	slab := make([]statEntry, len(names))
	out := make([]*statEntry, 0, len(names))
	cname := new([unix.NAME_MAX + 1]byte)
	for i, name := range names {
		e := &slab[i]
		e.name = name
		err := lstatAt(l.fd, name, cname, &e.st)
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

// appendDirentNames appends the names of the getdents64 records in buf
// (parseDirent) but deleted ones, "." and "..", as unix.ParseDirent does,
// cut from one string for all of them (ParseDirent allocates one per
// name). A record that does not fit in buf ends the parse.
func appendDirentNames(names []string, buf []byte) []string {
	var all []byte
	var ends []int
	for {
		name, _, n, ok := parseDirent(buf)
		if !ok {
			break
		}
		deleted := binary.NativeEndian.Uint64(buf) == 0 // d_ino
		buf = buf[n:]
		if deleted || string(name) == "." || string(name) == ".." {
			continue
		}
		all = append(all, name...)
		ends = append(ends, len(all))
	}
	s, from := string(all), 0
	for _, end := range ends {
		names = append(names, s[from:end])
		from = end
	}
	return names
}

// lstatAt is fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW) with name
// made a C string in cname (x/sys/unix allocates one per call).
func lstatAt(dirfd int, name string, cname *[unix.NAME_MAX + 1]byte, st *syscall.Stat_t) error {
	if len(name) > unix.NAME_MAX || strings.IndexByte(name, 0) >= 0 {
		return unix.Fstatat(dirfd, name, (*unix.Stat_t)(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW)
	}
	cname[copy(cname[:], name)] = 0
	_, _, errno := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(&cname[0])),
		uintptr(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// The listing fills a syscall.Stat_t (what FileInfo.Sys gives everywhere
// else) through x/sys/unix's fstatat: the two types describe the same
// kernel structure.
var _ = [1]struct{}{}[unsafe.Sizeof(syscall.Stat_t{})-unsafe.Sizeof(unix.Stat_t{})]

// statEntry is an entry of a walked directory with its lstat data: both
// its fs.DirEntry and its fs.FileInfo.
type statEntry struct {
	name string
	st   syscall.Stat_t
}

func (e *statEntry) Name() string               { return e.name }
func (e *statEntry) IsDir() bool                { return e.st.Mode&syscall.S_IFMT == syscall.S_IFDIR }
func (e *statEntry) Type() fs.FileMode          { return e.Mode().Type() }
func (e *statEntry) Info() (fs.FileInfo, error) { return e, nil }
func (e *statEntry) Size() int64                { return e.st.Size }
func (e *statEntry) ModTime() time.Time         { return time.Unix(e.st.Mtim.Unix()) }
func (e *statEntry) Sys() any                   { return &e.st }
func (e *statEntry) String() string             { return fs.FormatDirEntry(e) }
func (e *statEntry) id() inode                  { return inode{uint64(e.st.Dev), e.st.Ino} }

// Mode is the entry's type and permission bits, as package os gives them.
func (e *statEntry) Mode() fs.FileMode {
	return fileMode(e.st.Mode)
}

// Vanished reports whether a walk error only says that an entry went away
// while the tree was walked: it was removed (ErrNotExist), or replaced by
// a link or by something that is not a directory (ErrOutsideRoot,
// ErrNotDir; links are never followed). A live server changes its files
// during a backup; such an entry is no longer there to be archived, and
// callers leave it out. Every other error (EMFILE, EACCES, EIO, a
// directory that cannot be listed) means a part of the tree could not be
// read: callers fail with it rather than return a partial result.
func Vanished(err error) bool {
	return errors.Is(err, ErrNotExist) || errors.Is(err, ErrOutsideRoot) || errors.Is(err, ErrNotDir)
}

// ShortPath shortens the path in a message for a person (a walk can meet
// names thousands of components deep): its start and its end stay.
func ShortPath(p string) string {
	const keep = 120
	if len(p) <= 2*keep+20 {
		return p
	}
	return p[:keep] + " … (" + strconv.Itoa(strings.Count(p, "/")) + " components) … " + p[len(p)-keep:]
}

// Errors of walks (see Walk).
var (
	// ErrWalkMoved: a directory the walk had left to save descriptors was
	// moved or removed before the walk could come back to it.
	ErrWalkMoved error = &sentinel{msg: "a directory moved while it was walked",
		user: usererr.New(usererr.Conflict, "The files changed while they were being read: try again.")}
	// ErrUncheckable: a walked file that a denylist applies to, whose name
	// the kernel cannot give (longer than PATH_MAX), so that it cannot be
	// checked against the denylist.
	ErrUncheckable error = &sentinel{msg: "file lies too deep to be checked against the denylist",
		user: usererr.New(usererr.Invalid, "A file lies too deep in the tree to be checked against the egg's denylist.")}
)

// deniedDir reports whether the directory l of the walk, at rel, or one of
// its ancestors matches the denylist dl, computed once per directory (the
// walk never changes dl midway: a denylist replaced during a walk applies
// from the next one). Concurrent callers may compute it twice, the same.
func (l *level) deniedDir(dl *denylist, rel string) bool {
	switch l.denied.Load() {
	case 1:
		return false
	case 2:
		return true
	}
	var v bool
	switch {
	case rel == "." || rel == "":
	case l.up == nil:
		v = dl.match(rel) // where the walk starts: every prefix, once
	default:
		up, _ := split(rel)
		v = l.up.deniedDir(dl, up) || dl.m.Match(strings.Split(rel, "/"), true)
	}
	if v {
		l.denied.Store(2)
	} else {
		l.denied.Store(1)
	}
	return v
}

// fileMode converts the kernel's st_mode the way package os does on Linux.
func fileMode(mode uint32) fs.FileMode {
	m := fs.FileMode(mode & 0o777)
	switch mode & syscall.S_IFMT {
	case syscall.S_IFBLK:
		m |= fs.ModeDevice
	case syscall.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFDIR:
		m |= fs.ModeDir
	case syscall.S_IFIFO:
		m |= fs.ModeNamedPipe
	case syscall.S_IFLNK:
		m |= fs.ModeSymlink
	case syscall.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if mode&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if mode&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}
