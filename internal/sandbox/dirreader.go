package sandbox

import (
	"encoding/binary"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DirReader reads one directory entry by entry, for listings of
// directories that may hold millions of entries: the kernel's records are
// read a buffer at a time (getdents64) and nothing is kept of an entry once
// the caller has had it, so its memory does not grow with the directory.
// Every operation on an entry (Lstat, ReadHead) is one system call relative
// to the directory's descriptor, never a walk from the root.
//
// A DirReader is not safe for concurrent use.
type DirReader struct {
	fsys *FS
	file *os.File
	rc   syscall.RawConn
	// rel is the cleaned name the directory was opened under; real is its
	// name as the kernel reported it at open (differs when in-root links
	// were followed on the way), or "" when unknown or not needed (trusted
	// view). Both are matched against the denylist by ReadHead.
	rel, real string

	buf      []byte // getdents64 records
	pos, end int
	eof      bool
}

// direntBufSize is the getdents64 buffer: about 1,000 short names per
// system call.
const direntBufSize = 32 << 10

// OpenDirReader opens the directory name (cleaned like every FS name; "."
// is the root) for reading its entries. In-root symbolic links on the way,
// the last component included, are followed as everywhere else; anything
// but a directory is ErrNotDir. The open never waits (O_DIRECTORY refuses
// a FIFO before opening it). Metadata is not denied, so the denylist is not
// checked here, only on the heads ReadHead reads.
func (f *FS) OpenDirReader(name string) (*DirReader, error) {
	const op = "readdir"
	rel, err := clean(op, name)
	if err != nil {
		return nil, err
	}
	file, err := f.s.root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, wrap(op, rel, err)
	}
	rc, err := file.SyscallConn()
	if err != nil {
		_ = file.Close()
		return nil, wrap(op, rel, err)
	}
	r := &DirReader{fsys: f, file: file, rc: rc, rel: rel, buf: make([]byte, direntBufSize)}
	if !f.trusted {
		if real, ok := f.s.fdRel(file); ok {
			r.real = real
		}
	}
	return r, nil
}

// Close releases the descriptor.
func (r *DirReader) Close() error { return wrap("close", r.rel, r.file.Close()) }

// Next returns the name of the next entry ("." and ".." are left out) and
// whether it is a directory (not following a link), in the order the
// filesystem gives them, or io.EOF after the last one.
func (r *DirReader) Next() (name string, isDir bool, err error) {
	for {
		if r.pos >= r.end {
			if r.eof {
				return "", false, io.EOF
			}
			if err := r.fill(); err != nil {
				return "", false, err
			}
			continue
		}
		b, typ, reclen, ok := parseDirent(r.buf[r.pos:r.end])
		if !ok {
			return "", false, newErr("readdir", r.rel, syscall.EIO)
		}
		r.pos += reclen
		if string(b) == "." || string(b) == ".." || len(b) == 0 {
			continue
		}
		name = string(b)
		switch typ {
		case unix.DT_DIR:
			return name, true, nil
		case unix.DT_UNKNOWN:
			// Some filesystems do not give the type: ask for it.
			fi, err := r.Lstat(name)
			if err != nil {
				continue // gone since it was listed
			}
			return name, fi.IsDir(), nil
		default:
			return name, false, nil
		}
	}
}

// fill reads the next records of the directory.
func (r *DirReader) fill() error {
	var n int
	var gerr error
	if err := r.rc.Control(func(fd uintptr) {
		for {
			n, gerr = unix.Getdents(int(fd), r.buf)
			if gerr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return closedErr("readdir", r.rel, err)
	}
	if gerr != nil {
		return wrap("readdir", r.rel, gerr)
	}
	r.pos, r.end = 0, n
	r.eof = n == 0
	return nil
}

// direntHeader is the size of linux_dirent64 before d_name: d_ino (8),
// d_off (8), d_reclen (2), d_type (1).
const direntHeader = 19

// parseDirent reads the linux_dirent64 record at the start of b: its name
// (up to its NUL), d_type and length. ok is false when b does not start
// with a whole record.
func parseDirent(b []byte) (name []byte, typ uint8, reclen int, ok bool) {
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

// entryName checks that name is one entry of the directory (a single path
// component), so that nothing given to an entry operation reaches another
// directory.
func (r *DirReader) entryName(op, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return newErr(op, r.join(r.rel, "(invalid name)"), ErrOutsideRoot)
	}
	return nil
}

func (r *DirReader) join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// Lstat returns the entry's own metadata (fstatat relative to the
// directory, AT_SYMLINK_NOFOLLOW): the same fs.FileInfo os.Lstat gives,
// Sys() a *syscall.Stat_t.
func (r *DirReader) Lstat(name string) (fs.FileInfo, error) {
	const op = "lstat"
	if err := r.entryName(op, name); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	var serr error
	if err := r.rc.Control(func(fd uintptr) {
		for {
			serr = unix.Fstatat(int(fd), name, &st, unix.AT_SYMLINK_NOFOLLOW)
			if serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return nil, closedErr(op, r.join(r.rel, name), err)
	}
	if serr != nil {
		return nil, wrap(op, r.join(r.rel, name), serr)
	}
	return &statInfo{name: name, st: sysStat(&st)}, nil
}

// sysStat is st as the syscall package spells it (what os's FileInfo.Sys
// gives, and what the callers type-assert).
func sysStat(st *unix.Stat_t) syscall.Stat_t {
	return syscall.Stat_t{
		Dev: st.Dev, Ino: st.Ino, Nlink: st.Nlink, Mode: st.Mode, Uid: st.Uid, Gid: st.Gid,
		Rdev: st.Rdev, Size: st.Size, Blksize: st.Blksize, Blocks: st.Blocks,
		Atim: syscall.Timespec{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec},
		Mtim: syscall.Timespec{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec},
		Ctim: syscall.Timespec{Sec: st.Ctim.Sec, Nsec: st.Ctim.Nsec},
	}
}

// ReadHead reads up to len(buf) bytes from the start of the entry name (to
// type it) with three system calls: openat relative to the directory with
// O_NOFOLLOW (a link is not followed) and O_NONBLOCK (a FIFO does not
// block), pread, close. A denied name is refused (ErrDenied) under the name
// the directory was opened with and under its real name, as Dir does; when
// the real name could not be read and there is a denylist, every head is
// refused.
func (r *DirReader) ReadHead(name string, buf []byte) (int, error) {
	const op = "read"
	if err := r.entryName(op, name); err != nil {
		return 0, err
	}
	rel := r.join(r.rel, name)
	if r.denied(name) {
		return 0, newErr(op, rel, ErrDenied)
	}
	var n int
	var rerr error
	if err := r.rc.Control(func(dfd uintptr) {
		fd, err := unix.Openat(int(dfd), name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err != nil {
			rerr = err
			return
		}
		n, rerr = unix.Pread(fd, buf, 0)
		_ = unix.Close(fd)
	}); err != nil {
		return 0, closedErr(op, rel, err)
	}
	if n < 0 {
		n = 0
	}
	return n, wrap(op, rel, rerr)
}

func (r *DirReader) denied(name string) bool {
	if r.fsys.trusted {
		return false
	}
	dl := r.fsys.s.deny.Load()
	if dl == nil {
		return false
	}
	if dl.match(r.join(r.rel, name)) {
		return true
	}
	return r.real == "" || (r.real != r.rel && dl.match(r.join(r.real, name)))
}

// statInfo is an fs.FileInfo made from a stat result, with the modes the
// os package gives (os.Lstat's fileStat cannot be made from a Stat_t).
type statInfo struct {
	name string
	st   syscall.Stat_t
}

func (fi *statInfo) Name() string       { return fi.name }
func (fi *statInfo) Size() int64        { return fi.st.Size }
func (fi *statInfo) ModTime() time.Time { return time.Unix(fi.st.Mtim.Unix()) }
func (fi *statInfo) IsDir() bool        { return fi.Mode().IsDir() }
func (fi *statInfo) Sys() any           { return &fi.st }

// Mode is the entry's type and permission bits, as package os gives them.
func (fi *statInfo) Mode() fs.FileMode {
	return fileMode(fi.st.Mode)
}
