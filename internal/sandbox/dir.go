package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Dir is a directory inside the root held open for many operations on its
// entries (extracting or reading a tree). Each name given to it is a single
// path component, resolved against the directory's descriptor and never
// through a symbolic link, so an entry costs one lookup instead of a walk
// from the root. Confinement holds because the descriptor was resolved
// inside the root when the Dir was opened and names cannot leave it.
//
// The descriptor follows the directory's inode: if the directory is renamed
// after OpenDir (within the root), entries keep landing in it at its new
// place, while errors and denylist checks still use the name it was opened
// under. A Dir is safe for concurrent use (its fields never change after
// OpenDir and every system call holds a reference on the descriptor); the
// *File values it returns are not.
type Dir struct {
	fsys *FS
	file *os.File
	rc   syscall.RawConn
	// rel is the cleaned name the Dir was opened under; real is its name as
	// the kernel reported it at OpenDir (differs when in-root links were
	// followed on the way), or "" when the denylist is not checked
	// (trusted view) or the name could not be read.
	rel, real string
}

// OpenDir opens the directory name (cleaned like every FS name; "." is the
// root). In-root symbolic links on the way to its parent are followed as
// everywhere else, but a symbolic link as the last component is refused
// (not followed), like a non-directory (ErrNotDir). Opening a Dir reads
// nothing and changes nothing, so the denylist is not checked here but on
// each entry.
func (f *FS) OpenDir(name string) (*Dir, error) {
	const op = "opendir"
	rel, err := f.clean(op, name)
	if err != nil {
		return nil, err
	}
	var file *os.File
	if rel == "." {
		file, err = f.s.root.OpenFile(".", os.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			return nil, wrap(op, rel, err)
		}
	} else {
		file, err = f.openLastNoFollow(op, rel)
		if err != nil {
			return nil, err
		}
	}
	rc, err := file.SyscallConn()
	if err != nil {
		_ = file.Close()
		return nil, wrap(op, rel, err)
	}
	d := &Dir{fsys: f, file: file, rc: rc, rel: rel}
	if !f.trusted {
		// One readlink now, so that each entry's denylist check is a pure
		// match (see checkDeny).
		if real, ok := f.s.fdRel(file); ok {
			d.real = real
		}
	}
	return d, nil
}

// openLastNoFollow opens the directory rel (not ".") through its parent,
// with O_NOFOLLOW on the last component.
func (f *FS) openLastNoFollow(op, rel string) (*os.File, error) {
	dir, base := split(rel)
	parent, err := f.s.root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, wrap(op, rel, err)
	}
	defer parent.Close()
	prc, err := parent.SyscallConn()
	if err != nil {
		return nil, wrap(op, rel, err)
	}
	fd := -1
	var oerr error
	if err := prc.Control(func(pfd uintptr) {
		fd, oerr = unix.Openat(int(pfd), base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	}); err != nil {
		return nil, wrap(op, rel, err)
	}
	if oerr != nil {
		// O_NOFOLLOW on a link gives ELOOP (or ENOTDIR with O_DIRECTORY on
		// some kernels): for a Dir both mean "not a directory".
		if errors.Is(oerr, unix.ELOOP) || errors.Is(oerr, unix.ENOTDIR) {
			errno, _ := oerr.(syscall.Errno)
			return nil, &Error{Op: op, Path: display(rel), Kind: ErrNotDir, Errno: errno}
		}
		return nil, wrap(op, rel, oerr)
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// Name returns the directory's name relative to the root, with a leading "/".
func (d *Dir) Name() string { return display(d.rel) }

// Close releases the descriptor.
func (d *Dir) Close() error {
	if d.file == nil {
		return nil // a DirStack's: the stack closes the descriptor
	}
	return wrap("close", d.rel, d.file.Close())
}

// entry checks that base is a single path component and returns the
// entry's name relative to the root. A bad base is ErrOutsideRoot, the
// sentinel clean gives to names that are not a plain downward path (".."
// above the root, a NUL byte): a base with a "/" or a ".." would reach
// another directory than this one, and "" or "." would name the directory
// itself, so none of them names an entry of this Dir; and like clean's
// answer, it tells a user no more than "does not exist".
func (d *Dir) entry(op, base string) (string, error) {
	switch {
	case strings.IndexByte(base, 0) >= 0:
		return "", newErr(op, d.join("(invalid name)"), ErrOutsideRoot)
	case base == "", base == ".", base == "..", strings.IndexByte(base, '/') >= 0:
		return "", newErr(op, d.join(base), ErrOutsideRoot)
	}
	rel := d.join(base)
	if err := d.checkDeny(op, rel, base); err != nil {
		return "", err
	}
	return rel, nil
}

func (d *Dir) join(base string) string {
	if d.rel == "." {
		return base
	}
	return d.rel + "/" + base
}

// checkDeny is FS.checkDeny without the walk: the entry itself is never
// followed (every operation uses O_NOFOLLOW or AT_SYMLINK_NOFOLLOW), and
// the directory's real name was read once at OpenDir, so matching the name
// as given and under the directory's real name covers what checkDeny's
// resolution would.
func (d *Dir) checkDeny(op, rel, base string) error {
	if d.fsys.trusted {
		return nil
	}
	dl := d.fsys.s.deny.Load()
	if dl == nil {
		return nil
	}
	if dl.match(rel) {
		return newErr(op, rel, ErrDenied)
	}
	if d.real == "" {
		// The directory's real name is unknown (it was not readable from
		// /proc at OpenDir): refuse, as checkOpened does.
		return newErr(op, rel, ErrDenied)
	}
	if d.real != d.rel {
		real := base
		if d.real != "." {
			real = d.real + "/" + base
		}
		if dl.match(real) {
			return newErr(op, rel, ErrDenied)
		}
	}
	return nil
}

// Create creates the regular file base in the directory, exclusively
// (O_CREAT|O_EXCL|O_NOFOLLOW, write-only), with mode perm (0644 when 0,
// regardless of umask) and the FS's owner, and returns it open for writing
// with the disk limit enforced on every write exactly as FS.OpenFile's
// files are. Something already at base (a link included) gives an error
// matching fs.ErrExist. When the limit is -1, it is refused (ErrNoSpace).
//
// It costs openat, the fcntl os.NewFile makes, fchmod (unless SetUmask
// made it needless), fchown when an
// owner is configured, and the fstat that registers it for the disk
// accounting; no check of the opened file's name (O_EXCL|O_NOFOLLOW
// created exactly this entry of this directory, whose name was checked).
// The new entry costs one block against the limit.
func (d *Dir) Create(base string, perm fs.FileMode) (*File, error) {
	const op = "open"
	rel, err := d.entry(op, base)
	if err != nil {
		return nil, err
	}
	s := d.fsys.s
	if s.limit.Load() < 0 {
		return nil, newErr(op, rel, ErrNoSpace)
	}
	if perm == 0 {
		perm = 0o644
	}
	perm &= fs.ModePerm
	// The new entry costs one block, reserved before it exists.
	if err := s.reserveEntry(); err != nil {
		return nil, newErr(op, rel, ErrNoSpace)
	}
	fd := -1
	var oerr error
	if err := d.rc.Control(func(dfd uintptr) {
		fd, oerr = unix.Openat(int(dfd), base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, uint32(perm))
	}); err != nil {
		s.release(blockSize)
		return nil, closedErr(op, rel, err)
	}
	if oerr != nil {
		s.release(blockSize)
		return nil, wrap(op, rel, oerr)
	}
	file := os.NewFile(uintptr(fd), rel)
	if !umaskKept(perm) {
		// The umask may have removed bits of perm at creation.
		_ = file.Chmod(perm)
	}
	s.fchown(file)
	w, err := s.track(file, rel, false, true)
	if err != nil {
		_ = file.Close()
		return nil, wrap(op, rel, err)
	}
	return w, nil
}

// Open opens the file base for reading (O_RDONLY|O_NOFOLLOW|O_NONBLOCK): a
// link at base is not followed (an error), and a FIFO does not block. The
// denylist is checked as FS.Open does: on the name, and (untrusted FS) on
// the file actually opened.
func (d *Dir) Open(base string) (*File, error) {
	const op = "open"
	rel, err := d.entry(op, base)
	if err != nil {
		return nil, err
	}
	fd, oerr, err := d.openat(base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY)
	if err != nil {
		return nil, closedErr(op, rel, err)
	}
	if oerr != nil {
		return nil, wrap(op, rel, oerr)
	}
	file := os.NewFile(uintptr(fd), rel)
	if err := d.fsys.checkOpened(op, rel, file); err != nil {
		_ = file.Close()
		return nil, err
	}
	return &File{f: file, s: d.fsys.s, rel: rel}, nil
}

// Lchtimes sets the access and modification times of base itself (a link
// is not followed), to the nanosecond.
func (d *Dir) Lchtimes(base string, atime, mtime time.Time) error {
	const op = "chtimes"
	rel, err := d.entry(op, base)
	if err != nil {
		return err
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	var uerr error
	if err := d.rc.Control(func(dfd uintptr) {
		uerr = unix.UtimesNanoAt(int(dfd), base, ts, unix.AT_SYMLINK_NOFOLLOW)
	}); err != nil {
		return closedErr(op, rel, err)
	}
	return wrap(op, rel, uerr)
}

// closedErr is the error of an operation on a closed Dir: the only way the
// descriptor's Control fails (the standard library's "use of closed file"
// is not fs.ErrClosed, so wrap would not recognise it).
func closedErr(op, rel string, err error) error {
	if err == nil {
		return nil
	}
	return newErr(op, rel, ErrClosed)
}
