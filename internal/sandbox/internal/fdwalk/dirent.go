// Package fdwalk is the sandbox's descriptor mechanics: reading a
// directory's getdents64 records, listing a directory relative to its
// descriptor, the stack of directory descriptors a walk or a writer holds
// from a start down to where it is (bounded however deep the tree, reopened
// through ".." checked by identity), and the walks built on them (in order,
// with a lister ahead; in parallel; the usage and count sums). It knows no
// root, name rules, denylist or accounting: package sandbox decides what
// may be walked and what a walked entry may be used for, and converts the
// errors here into its own.
package fdwalk

import (
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Inode identifies a file: its device and inode number.
type Inode struct{ Dev, Ino uint64 }

// InodeOf is the identity in st.
func InodeOf(st *syscall.Stat_t) Inode { return Inode{uint64(st.Dev), st.Ino} }

// DirFlags open a directory for listing: never through a link, never
// waiting (a FIFO is refused by O_DIRECTORY before it is opened).
const DirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK

// BufSize is the getdents64 buffer of a listing: about 1,000 short names
// per system call.
const BufSize = 32 << 10

// ErrSwapped: a directory opened by name is not the one its parent's
// listing saw (swapped meanwhile for another one or for a link).
var ErrSwapped = errors.New("fdwalk: directory swapped since it was listed")

// ErrMoved: a directory left to save descriptors was moved or removed
// before it could be reopened.
var ErrMoved = errors.New("fdwalk: directory moved while it was walked")

// ErrBadRecord: a getdents64 buffer does not hold a whole record.
var ErrBadRecord = errors.New("fdwalk: malformed directory record")

// Openat is openat(2) retried on EINTR.
func Openat(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// FdInode is the identity of the open file fd.
func FdInode(fd int) (Inode, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Inode{}, err
	}
	return Inode{uint64(st.Dev), st.Ino}, nil
}

// direntHeader is the size of linux_dirent64 before d_name: d_ino (8),
// d_off (8), d_reclen (2), d_type (1).
const direntHeader = 19

// ParseDirent reads the linux_dirent64 record at the start of b: its name
// (up to its NUL), d_type and length. ok is false when b does not start
// with a whole record.
func ParseDirent(b []byte) (name []byte, typ uint8, reclen int, ok bool) {
	if len(b) < direntHeader {
		return nil, 0, 0, false
	}
	reclen = int(binary.NativeEndian.Uint16(b[16:18]))
	if reclen <= direntHeader || reclen > len(b) {
		return nil, 0, 0, false
	}
	name = b[direntHeader:reclen]
	if i := strings.IndexByte(string(name), 0); i >= 0 {
		name = name[:i]
	}
	return name, b[18], reclen, true
}

// AppendNames appends the names of the getdents64 records in buf
// (ParseDirent) but deleted ones, "." and "..", as unix.ParseDirent does,
// cut from one string for all of them (ParseDirent allocates one per
// name). A record that does not fit in buf ends the parse.
func AppendNames(names []string, buf []byte) []string {
	var all []byte
	var ends []int
	for {
		name, _, n, ok := ParseDirent(buf)
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

// Records reads one directory's getdents64 records a buffer at a time,
// so that its memory does not grow with the directory. It is not safe for
// concurrent use.
type Records struct {
	buf      []byte
	pos, end int
	eof      bool
}

// NewRecords returns a reader with a buffer of BufSize.
func NewRecords() *Records { return &Records{buf: make([]byte, BufSize)} }

// Next returns the name and d_type of the next record ("." and ".." left
// out), calling fill to read the next records into its buffer (getdents64:
// the bytes read, 0 at the end) when the buffer is spent; io.EOF after the
// last one, ErrBadRecord for a record that does not fit, or fill's error.
func (r *Records) Next(fill func(buf []byte) (int, error)) (string, uint8, error) {
	for {
		if r.pos >= r.end {
			if r.eof {
				return "", 0, io.EOF
			}
			n, err := fill(r.buf)
			if err != nil {
				return "", 0, err
			}
			r.pos, r.end = 0, n
			r.eof = n == 0
			continue
		}
		b, typ, reclen, ok := ParseDirent(r.buf[r.pos:r.end])
		if !ok {
			return "", 0, ErrBadRecord
		}
		r.pos += reclen
		if string(b) == "." || string(b) == ".." || len(b) == 0 {
			continue
		}
		return string(b), typ, nil
	}
}

// LstatAt is fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW) with name
// made a C string in cname (x/sys/unix allocates one per call).
func LstatAt(dirfd int, name string, cname *[unix.NAME_MAX + 1]byte, st *syscall.Stat_t) error {
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

// A listing fills a syscall.Stat_t (what FileInfo.Sys gives everywhere
// else) through x/sys/unix's fstatat: the two types describe the same
// kernel structure.
var _ = [1]struct{}{}[unsafe.Sizeof(syscall.Stat_t{})-unsafe.Sizeof(unix.Stat_t{})]

// Entry is an entry of a listed directory with its lstat data: both its
// fs.DirEntry and its fs.FileInfo.
type Entry struct {
	Base string // its name in its directory
	St   syscall.Stat_t
}

func (e *Entry) Name() string               { return e.Base }
func (e *Entry) IsDir() bool                { return e.St.Mode&syscall.S_IFMT == syscall.S_IFDIR }
func (e *Entry) Type() fs.FileMode          { return e.Mode().Type() }
func (e *Entry) Info() (fs.FileInfo, error) { return e, nil }
func (e *Entry) Size() int64                { return e.St.Size }
func (e *Entry) ModTime() time.Time         { return time.Unix(e.St.Mtim.Unix()) }
func (e *Entry) Sys() any                   { return &e.St }
func (e *Entry) String() string             { return fs.FormatDirEntry(e) }

// ID is the entry's identity as listed.
func (e *Entry) ID() Inode { return InodeOf(&e.St) }

// Mode is the entry's type and permission bits, as package os gives them.
func (e *Entry) Mode() fs.FileMode { return FileMode(e.St.Mode) }

// FileMode converts the kernel's st_mode the way package os does on Linux.
func FileMode(mode uint32) fs.FileMode {
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
