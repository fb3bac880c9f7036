package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/sandbox/internal/fdwalk"
)

// The operations below let a caller that holds a Dir (an extraction
// walking down an archive's tree) create and change its entries by one
// name each, so that the cost of an entry does not grow with its depth.
// None of them follows a symbolic link at base.

// Lstat returns the FileInfo of the entry base itself (a link is not
// followed).
func (d *Dir) Lstat(base string) (fs.FileInfo, error) {
	const op = "lstat"
	rel, err := d.name(op, base)
	if err != nil {
		return nil, err
	}
	e := &fdwalk.Entry{Base: base}
	var serr error
	if err := d.rc.Control(func(dfd uintptr) {
		serr = unix.Fstatat(int(dfd), base, (*unix.Stat_t)(unsafe.Pointer(&e.St)), unix.AT_SYMLINK_NOFOLLOW)
	}); err != nil {
		return nil, closedErr(op, rel, err)
	}
	if serr != nil {
		return nil, wrap(op, rel, serr)
	}
	return e, nil
}

// name is entry without the denylist check, for what only reads metadata.
func (d *Dir) name(op, base string) (string, error) {
	if d.fsys.trusted {
		return d.entry(op, base)
	}
	t := &Dir{fsys: d.fsys.Trusted(), rel: d.rel}
	return t.entry(op, base)
}

// openat opens name relative to d with flags (retried on EINTR): oerr is
// the open's error, err that of d being closed.
func (d *Dir) openat(name string, flags int) (fd int, oerr, err error) {
	fd = -1
	err = d.rc.Control(func(dfd uintptr) { fd, oerr = fdwalk.Openat(int(dfd), name, flags) })
	return fd, oerr, err
}

// Sub opens the directory base of d as a Dir, never through a symbolic
// link: a link or a non-directory at base is ErrNotDir.
func (d *Dir) Sub(base string) (*Dir, error) {
	fd, rel, err := d.subFD(base)
	if err != nil {
		return nil, err
	}
	return d.fsys.dirOf(os.NewFile(uintptr(fd), rel), rel)
}

// subFD opens the directory base of d as Sub does, and returns its
// descriptor and name.
func (d *Dir) subFD(base string) (int, string, error) {
	const op = "opendir"
	rel, err := d.name(op, base)
	if err != nil {
		return -1, "", err
	}
	fd, oerr, err := d.openat(base, fdwalk.DirFlags)
	if err != nil {
		return -1, "", closedErr(op, rel, err)
	}
	if oerr != nil {
		if errors.Is(oerr, unix.ELOOP) || errors.Is(oerr, unix.ENOTDIR) {
			errno, _ := oerr.(syscall.Errno)
			return -1, "", &Error{Op: op, Path: display(rel), Kind: ErrNotDir, Errno: errno}
		}
		return -1, "", wrap(op, rel, oerr)
	}
	return fd, rel, nil
}

// dirOf makes a Dir of file, a directory opened at rel.
func (f *FS) dirOf(file *os.File, rel string) (*Dir, error) {
	rc, err := file.SyscallConn()
	if err != nil {
		_ = file.Close()
		return nil, wrap("opendir", rel, err)
	}
	d := &Dir{fsys: f, file: file, rc: rc, rel: rel}
	if !f.trusted {
		if real, ok := f.s.fdRel(file); ok {
			d.real = real
		}
	}
	return d, nil
}

// Mkdir creates the directory base (ErrExist when something is there),
// charged one block, with mode perm (0755 when 0) and the FS's owner.
func (d *Dir) Mkdir(base string, perm fs.FileMode) error {
	const op = "mkdir"
	rel, err := d.entry(op, base)
	if err != nil {
		return err
	}
	s := d.fsys.s
	if perm == 0 {
		perm = 0o755
	}
	perm &= fs.ModePerm
	if err := s.reserveEntry(); err != nil {
		return newErr(op, rel, ErrNoSpace)
	}
	var merr error
	if err := d.rc.Control(func(dfd uintptr) {
		if merr = unix.Mkdirat(int(dfd), base, uint32(perm)); merr != nil {
			return
		}
		// The umask may have removed bits; a link cannot be at base now
		// unless planted since, and neither call follows one.
		if !umaskKept(perm) {
			_ = fchmodNoFollow(int(dfd), base, uint32(perm))
		}
		s.fchownat(int(dfd), base)
	}); err != nil {
		s.release(blockSize)
		return closedErr(op, rel, err)
	}
	if merr != nil {
		s.release(blockSize)
	}
	return wrap(op, rel, merr)
}

// Symlink creates the symbolic link base with the given target (stored as
// data), charged one block and owned by the FS's owner.
func (d *Dir) Symlink(target, base string) error {
	const op = "symlink"
	rel, err := d.entry(op, base)
	if err != nil {
		return err
	}
	if target == "" || len(target) >= unix.PathMax {
		return newErr(op, rel, ErrInvalid)
	}
	for i := 0; i < len(target); i++ {
		if target[i] == 0 {
			return newErr(op, rel, ErrInvalid)
		}
	}
	s := d.fsys.s
	if err := s.reserveEntry(); err != nil {
		return newErr(op, rel, ErrNoSpace)
	}
	var serr error
	if err := d.rc.Control(func(dfd uintptr) {
		if serr = unix.Symlinkat(target, int(dfd), base); serr == nil {
			s.fchownat(int(dfd), base)
		}
	}); err != nil {
		s.release(blockSize)
		return closedErr(op, rel, err)
	}
	if serr != nil {
		s.release(blockSize)
	}
	return wrap(op, rel, serr)
}

// Remove removes the file, link or empty directory base (a link itself,
// never its target) and releases what that frees.
func (d *Dir) Remove(base string) error {
	const op = "remove"
	rel, err := d.entry(op, base)
	if err != nil {
		return err
	}
	fi, err := d.Lstat(base)
	if err != nil {
		return err
	}
	flags := 0
	if fi.IsDir() {
		flags = unix.AT_REMOVEDIR
	}
	var cerr error
	freed, err := d.fsys.s.unlinkCharged(fi, func() error {
		var uerr error
		cerr = d.rc.Control(func(dfd uintptr) { uerr = unix.Unlinkat(int(dfd), base, flags) })
		if cerr != nil {
			return cerr
		}
		return uerr
	})
	if cerr != nil {
		return closedErr(op, rel, cerr)
	}
	if err != nil {
		return wrap(op, rel, err)
	}
	d.fsys.s.release(freed)
	return nil
}

// RemoveAll removes base and everything below it (FS.RemoveAll of its
// name: the way to d's name is resolved again from the root, a cost paid
// only when an extraction replaces a tree).
func (d *Dir) RemoveAll(ctx context.Context, base string) error {
	rel, err := d.entry("remove", base)
	if err != nil {
		return err
	}
	return d.fsys.RemoveAll(ctx, rel)
}

// Chmod sets the permission bits (0777 only) of base itself; a symbolic
// link at base is ErrInvalid, never followed.
func (d *Dir) Chmod(base string, mode fs.FileMode) error {
	const op = "chmod"
	rel, err := d.entry(op, base)
	if err != nil {
		return err
	}
	var cerr error
	if err := d.rc.Control(func(dfd uintptr) {
		cerr = fchmodNoFollow(int(dfd), base, uint32(mode&fs.ModePerm))
	}); err != nil {
		return closedErr(op, rel, err)
	}
	if cerr == ErrInvalid {
		return newErr(op, rel, ErrInvalid)
	}
	return wrap(op, rel, cerr)
}

// Rewrite opens the existing regular file base for writing, truncated,
// never through a link (ELOOP) and never blocking on a FIFO (refused,
// ErrNotRegular), with the disk limit enforced as Create's files are.
func (d *Dir) Rewrite(base string) (*File, error) {
	w, size, err := d.Overwrite(base)
	if err == nil && size > 0 {
		if err = w.Truncate(0); err != nil {
			_ = w.Close()
			return nil, err
		}
	}
	return w, err
}

// Overwrite is Rewrite without the truncation: the file keeps its blocks
// and size (returned) until the caller truncates it to what it wrote.
// Rewriting a file in place costs the file system no block allocation
// where a truncation to zero frees every block and allocates them again
// (and makes ext4 write the file back on close).
func (d *Dir) Overwrite(base string) (*File, int64, error) {
	const op = "open"
	rel, err := d.entry(op, base)
	if err != nil {
		return nil, 0, err
	}
	s := d.fsys.s
	if s.limit.Load() < 0 {
		return nil, 0, newErr(op, rel, ErrNoSpace)
	}
	fd, oerr, err := d.openat(base, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY)
	if err != nil {
		return nil, 0, closedErr(op, rel, err)
	}
	if errors.Is(oerr, unix.ENXIO) {
		return nil, 0, newErr(op, rel, ErrNotRegular)
	}
	if oerr != nil {
		return nil, 0, wrap(op, rel, oerr)
	}
	file := os.NewFile(uintptr(fd), rel)
	fi, err := file.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = newErr(op, rel, ErrNotRegular)
	}
	var w *File
	if err == nil {
		w, err = s.track(file, rel, false, false)
	}
	if err != nil {
		_ = file.Close()
		return nil, 0, wrap(op, rel, err)
	}
	return w, fi.Size(), nil
}

// fchmodNoFollow sets the mode of name in dirfd on the entry itself: it is
// pinned with O_PATH|O_NOFOLLOW (a link stays a link, and is refused) and
// the mode set on that inode through /proc, nothing resolved twice.
func fchmodNoFollow(dirfd int, name string, perm uint32) error {
	pfd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return ErrInvalid
	}
	return unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(pfd), perm, 0)
}

// fchownat gives name in dirfd (itself, a link not followed) the
// configured owner.
func (s *state) fchownat(dirfd int, name string) {
	if s.uid < 0 && s.gid < 0 {
		return
	}
	_ = unix.Fchownat(dirfd, name, s.uid, s.gid, unix.AT_SYMLINK_NOFOLLOW)
}
