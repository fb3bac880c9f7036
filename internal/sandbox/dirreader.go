package sandbox

import (
	"io/fs"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/sandbox/internal/fdwalk"
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

	recs *fdwalk.Records // getdents64 records
}

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
	r := &DirReader{fsys: f, file: file, rc: rc, rel: rel, recs: fdwalk.NewRecords()}
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
		name, typ, err := r.recs.Next(r.fill)
		if err == fdwalk.ErrBadRecord {
			return "", false, newErr("readdir", r.rel, syscall.EIO)
		}
		if err != nil {
			return "", false, err
		}
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

// fill reads the next records of the directory into buf.
func (r *DirReader) fill(buf []byte) (int, error) {
	var n int
	var gerr error
	if err := r.rc.Control(func(fd uintptr) {
		for {
			n, gerr = unix.Getdents(int(fd), buf)
			if gerr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return 0, closedErr("readdir", r.rel, err)
	}
	if gerr != nil {
		return 0, wrap("readdir", r.rel, gerr)
	}
	return n, nil
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
	return &fdwalk.Entry{Base: name, St: sysStat(&st)}, nil
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
