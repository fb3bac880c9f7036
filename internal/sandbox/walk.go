package sandbox

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/sandbox/internal/fdwalk"
)

// Walk walks the tree at dir like fs.WalkDir: fn is called for dir and for
// every entry below it, in lexical order, with paths relative to the root
// ("." for the root, "plugins/x.jar" below it). Symbolic links are reported
// as entries (d.Type() has fs.ModeSymlink) and never followed, dir itself
// included. d.Info() is the entry's own lstat data, taken relative to its
// parent directory's descriptor when the directory was listed. fs.SkipDir
// and fs.SkipAll work as in fs.WalkDir.
//
// The walk holds a bounded number of descriptors however deep the tree
// (see heldLevels), and it loses nothing silently: a directory or entry it
// cannot open or read is reported to fn with the error (d may then be
// nil), whose path names it. Vanished tells the errors that only say an
// entry went away while the walk ran (removed, or a directory swapped for
// a link or a file: it is then not walked into) from those that mean a
// part of the tree could not be read; callers leave the first kind out and
// fail with the second. The walk itself fails, without asking fn, when a
// directory it had to leave to save descriptors moved before it could come
// back (ErrWalkMoved): it can then not tell what it covered.
func (f *FS) Walk(dir string, fn fs.WalkDirFunc) error {
	return f.WalkContext(context.Background(), dir, fn)
}

// WalkContext is Walk that stops with ctx.Err() when ctx is done.
func (f *FS) WalkContext(ctx context.Context, dir string, fn fs.WalkDirFunc) error {
	rel, err := f.clean("walk", dir)
	if err != nil {
		return err
	}
	return f.s.walk(ctx, rel, 0, fn)
}

// WalkParallel is WalkContext with the directories listed by up to workers
// goroutines at once: fn is called concurrently and in no particular order,
// except that a directory is reported before its entries. Links are never
// followed, errors are reported to fn, and descriptors stay bounded, as in
// Walk (each worker walks a subtree deeper than heldLevels on its own, the
// way Walk does). fs.SkipDir returned for a directory skips it; fs.SkipAll
// or any other error stops the walk, and the first such error is returned
// (fs.SkipAll as nil). It is for scans of large trees (tens of thousands of
// entries), where listing and lstat-ing dominate and a second core halves
// the time.
func (f *FS) WalkParallel(ctx context.Context, dir string, workers int, fn fs.WalkDirFunc) error {
	rel, err := f.clean("walk", dir)
	if err != nil {
		return err
	}
	return f.s.walk(ctx, rel, max(1, workers), fn)
}

// heldLevels is how many directories from the start of a walk keep their
// descriptor open (fdwalk.Held).
const heldLevels = fdwalk.Held

// walk reports rel and, when it is a directory, walks it: in order (with
// the lister ahead) when workers is 0, else with that many workers
// (WalkParallel).
func (s *state) walk(ctx context.Context, rel string, workers int, fn fs.WalkDirFunc) error {
	fi, err := s.root.Lstat(rel)
	if err != nil {
		return skipAllIsNil(fn(rel, nil, wrap("walk", rel, err)))
	}
	d := fs.FileInfoToDirEntry(fi)
	if err := fn(rel, d, nil); err != nil || !d.IsDir() {
		return skipAllIsNil(err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	top, err := s.openStart(rel, fi)
	if err != nil {
		return skipAllIsNil(fn(rel, d, wrap("walk", rel, err)))
	}
	w := &fdwalk.Walker{
		Fn:    fn,
		Owner: s,
		Wrap:  func(rel string, err error) error { return wrap("walk", rel, err) },
		Moved: func(rel string) error { return &Error{Op: "walk", Path: display(rel), Kind: ErrWalkMoved} },
		Tune:  s.ahead,
	}
	if workers == 0 {
		return skipAllIsNil(w.Walk(ctx, top, rel, d))
	}
	return skipAllIsNil(w.WalkParallel(ctx, top, rel, d, workers))
}

func skipAllIsNil(err error) error {
	if err == fs.SkipAll || err == fs.SkipDir {
		return nil
	}
	return err
}

// openStart opens the directory rel (lstat-ed as fi) where a walk starts,
// through the root (in-root links on the way to it are followed, as by
// every operation that takes a name), checking that it is still fi.
func (s *state) openStart(rel string, fi fs.FileInfo) (*fdwalk.Level, error) {
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(x uintptr) { fd, derr = unix.FcntlInt(x, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if id, err := fdwalk.FdInode(fd); err != nil || !ok || id != fdwalk.InodeOf(st) {
		_ = unix.Close(fd)
		if err != nil {
			return nil, err
		}
		return nil, ErrOutsideRoot
	}
	return fdwalk.Start(fd, fdwalk.InodeOf(st)), nil
}

// walkEntry is an entry reported by Walk, with the directory it was listed
// in (open while fn runs for it) and the sandbox it belongs to (Owner).
type walkEntry = fdwalk.Item

// entryOf returns the walk entry d is, when it belongs to f's sandbox.
func (f *FS) entryOf(d fs.DirEntry) (*walkEntry, bool) {
	e, ok := d.(*walkEntry)
	return e, ok && e.Owner == f.s && e.Dir.FD() >= 0
}

// deniedWalked is DeniedEntry for a name the walk made: already clean, and
// possibly deeper than any name a user may give.
func (f *FS) deniedWalked(rel string) bool {
	if f.trusted {
		return false
	}
	d := f.s.deny.Load()
	return d != nil && d.match(strings.TrimPrefix(rel, "/"))
}

// DeniedWalkEntry is DeniedEntry for the entry d that Walk is reporting at
// rel, in time linear in its depth: whether its directory or an ancestor
// is denied is worked out once per directory of the walk (matching every
// prefix of a name thousands of components deep for each of its entries
// would cost seconds per entry). Any other d is checked by name.
func (f *FS) DeniedWalkEntry(rel string, d fs.DirEntry) bool {
	e, ok := f.entryOf(d)
	if !ok {
		return f.DeniedEntry(rel)
	}
	if f.trusted {
		return false
	}
	dl := f.s.deny.Load()
	if dl == nil {
		return false
	}
	rel = strings.TrimPrefix(rel, "/")
	up, _ := split(rel)
	if deniedDir(e.Dir, dl, up) {
		return true
	}
	parts := strings.Split(rel, "/")
	return dl.m.Match(parts, false) || dl.m.Match(parts, true)
}

// ReadHead reads up to len(buf) bytes from the start of the regular file d
// that Walk is reporting at rel (to type it), with three system calls and
// no *os.File: openat relative to the walked directory with O_NOFOLLOW (a
// link swapped in is not followed) and O_NONBLOCK (a FIFO swapped in does
// not block), pread, close. Denied names are refused by name only (the
// entry itself is what is opened; in-root links on the way to the walked
// directory are not resolved for this check). It must be called from the
// walk's fn for that entry; any other d is opened by name.
func (f *FS) ReadHead(rel string, d fs.DirEntry, buf []byte) (int, error) {
	e, ok := f.entryOf(d)
	if !ok {
		file, err := f.open("read", rel)
		if err != nil {
			return 0, err
		}
		defer file.Close()
		n, err := file.ReadAt(buf, 0)
		if err == io.EOF {
			err = nil
		}
		return n, err
	}
	rel = strings.TrimPrefix(rel, "/")
	if f.DeniedWalkEntry(rel, d) {
		return 0, newErr("read", rel, ErrDenied)
	}
	fd, err := fdwalk.Openat(e.Dir.FD(), e.Base, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY)
	if err != nil {
		return 0, wrap("read", rel, err)
	}
	defer unix.Close(fd)
	n, err := unix.Pread(fd, buf, 0)
	if n < 0 {
		n = 0
	}
	return n, wrap("read", rel, err)
}

// OpenEntry opens for reading the entry d that Walk is reporting at rel, as
// Open(rel) does, but through the descriptor of the directory the walk
// listed it in: one openat instead of one per path component, which counts
// when archiving tens of thousands of files, and no name longer than the
// walk's own. A link swapped in for the entry is not followed
// (ErrOutsideRoot, which Vanished accepts). It must be called from the
// walk's fn for that entry; any other d is opened by name.
func (f *FS) OpenEntry(rel string, d fs.DirEntry) (*File, error) {
	e, ok := f.entryOf(d)
	if !ok {
		return f.open("open", rel)
	}
	rel = strings.TrimPrefix(rel, "/")
	if f.DeniedWalkEntry(rel, d) {
		return nil, newErr("open", rel, ErrDenied)
	}
	// O_NONBLOCK, as in open: a FIFO swapped in for the listed file must
	// not hold the walk until a writer comes (callers refuse what is not a
	// regular file once it is open).
	fd, err := fdwalk.Openat(e.Dir.FD(), e.Base, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY)
	if err != nil {
		return nil, wrap("open", rel, err)
	}
	file := os.NewFile(uintptr(fd), e.Base)
	if err := f.checkEntryOpened(rel, file); err != nil {
		_ = file.Close()
		return nil, err
	}
	return &File{f: file, s: f.s, rel: rel}, nil
}

// checkEntryOpened is checkOpened for a walked entry (a directory on its
// way may have been renamed into a denied place since it was listed). When
// the kernel cannot name the file (a path longer than PATH_MAX, which a
// deep tree has) the entry cannot be checked: that is an error naming it,
// not a denial that would leave it silently out of an archive.
func (f *FS) checkEntryOpened(rel string, file *os.File) error {
	if f.trusted || f.s.deny.Load() == nil {
		return nil
	}
	real, ok := f.s.fdRel(file)
	if !ok {
		return &Error{Op: "open", Path: display(rel), Kind: ErrUncheckable, Errno: syscall.ENAMETOOLONG}
	}
	// Where it was listed: the name was checked already (DeniedWalkEntry).
	if real != rel && f.s.deny.Load().match(real) {
		return newErr("open", rel, ErrDenied)
	}
	return nil
}

func sameFile(a, b fs.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// removeTree removes the entry base of the directory parent and, for a
// directory, everything below it, never following a symbolic link. It
// checks ctx before each entry and returns what the removal frees from the
// usage (see freedBy).
func (s *state) removeTree(ctx context.Context, parent *os.Root, base string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	fi, err := parent.Lstat(base)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	remove := func() error { return parent.Remove(base) }
	if !fi.IsDir() {
		freed, err := s.unlinkCharged(fi, remove)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, err
		}
		return freed, nil
	}
	var freed int64
	// A directory that gains entries while it is emptied (a process still
	// writing) is emptied again, a bounded number of times.
	for range 3 {
		n, err := s.emptyDir(ctx, parent, base, fi)
		freed += n
		if err != nil {
			return freed, err
		}
		dirFreed, err := s.unlinkCharged(fi, remove)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return freed + dirFreed, nil
		}
		if !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			return freed, err
		}
	}
	dirFreed, err := s.unlinkCharged(fi, remove)
	return freed + dirFreed, err
}

// emptyDir removes everything inside the directory base of parent, after
// checking that what it opened is the directory that was lstat-ed (want):
// a directory swapped for a link is not emptied.
func (s *state) emptyDir(ctx context.Context, parent *os.Root, base string, want fs.FileInfo) (int64, error) {
	sub, err := parent.OpenRoot(base)
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	got, err := sub.Stat(".")
	if err != nil {
		return 0, err
	}
	if !sameFile(want, got) {
		return 0, ErrOutsideRoot
	}
	return s.removeChildren(ctx, sub)
}

// removeChildren removes every entry of the directory dir (the root it
// was opened as stays).
func (s *state) removeChildren(ctx context.Context, dir *os.Root) (int64, error) {
	d, err := dir.Open(".")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	var freed int64
	for {
		names, rerr := d.Readdirnames(512)
		for _, name := range names {
			n, err := s.removeTree(ctx, dir, name)
			freed += n
			if err != nil {
				return freed, err
			}
		}
		if rerr == io.EOF {
			return freed, nil
		}
		if rerr != nil {
			return freed, rerr
		}
	}
}

// LchownEntry changes the owner of the entry d that Walk is reporting at
// rel (a link itself, never its target) through the descriptor of the
// directory the walk listed it in, and not at all when the walk's lstat of
// it already shows that owner (a tree started a thousand times is chowned
// once). uid or gid -1 leaves that id alone. It must be called from the
// walk's fn for that entry; any other d is changed by name (Lchown).
func (f *FS) LchownEntry(rel string, d fs.DirEntry, uid, gid int) error {
	const op = "chown"
	e, ok := f.entryOf(d)
	if !ok {
		return f.Lchown(rel, uid, gid)
	}
	rel = strings.TrimPrefix(rel, "/")
	if f.DeniedWalkEntry(rel, d) {
		return newErr(op, rel, ErrDenied)
	}
	if (uid < 0 || int(e.St.Uid) == uid) && (gid < 0 || int(e.St.Gid) == gid) {
		return nil
	}
	return wrap(op, rel, unix.Fchownat(e.Dir.FD(), e.Base, uid, gid, unix.AT_SYMLINK_NOFOLLOW))
}

// ReadlinkEntry reads the target of the symbolic link d that Walk is
// reporting at rel, relative to the directory the walk listed it in (no
// walk from the root, no name longer than the walk's own). It must be
// called from the walk's fn for that entry; any other d is read by name.
// A name that is no longer a link is ErrOutsideRoot (Vanished), as
// ControlEntry's swapped entry.
func (f *FS) ReadlinkEntry(rel string, d fs.DirEntry) (string, error) {
	e, ok := f.entryOf(d)
	if !ok {
		return f.Readlink(rel)
	}
	rel = strings.TrimPrefix(rel, "/")
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(e.Dir.FD(), e.Base, buf)
		if err == unix.EINVAL {
			// The name is no longer a link (a directory or a file swapped
			// in since the listing): the entry listed is gone.
			return "", newErr("readlink", rel, ErrOutsideRoot)
		}
		if err != nil {
			return "", wrap("readlink", rel, err)
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// ControlEntry opens the directory or regular file d that Walk is reporting
// at rel, relative to the directory the walk listed it in, and calls fn
// with the descriptor (for an ioctl on the inode itself, such as the
// quota project). The open never follows a link and never blocks
// (O_NOFOLLOW, O_NONBLOCK), and fn runs only when what was opened has the
// inode number and type the walk listed: an entry swapped meanwhile for a
// link, a FIFO or a device is ErrOutsideRoot, which Vanished accepts. It
// must be called from the walk's fn for that entry.
func (f *FS) ControlEntry(rel string, d fs.DirEntry, fn func(fd int) error) error {
	const op = "open"
	rel = strings.TrimPrefix(rel, "/")
	e, ok := f.entryOf(d)
	if !ok {
		return newErr(op, rel, ErrOutsideRoot)
	}
	if f.DeniedWalkEntry(rel, d) {
		return newErr(op, rel, ErrDenied)
	}
	fd, err := fdwalk.Openat(e.Dir.FD(), e.Base, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY)
	if err != nil {
		return wrap(op, rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return wrap(op, rel, err)
	}
	// Same inode number and type: a number freed and reused at once by a
	// new entry of the same name is still the server's own file.
	if (fdwalk.Inode{Dev: uint64(st.Dev), Ino: st.Ino}) != e.ID() || st.Mode&unix.S_IFMT != e.St.Mode&unix.S_IFMT {
		return newErr(op, rel, ErrOutsideRoot)
	}
	return wrap(op, rel, fn(fd))
}
