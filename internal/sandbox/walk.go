package sandbox

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Walk walks the tree at dir like fs.WalkDir: fn is called for dir and for
// every entry below it, in lexical order, with paths relative to the root
// ("." for the root, "plugins/x.jar" below it). Symbolic links are reported
// as entries (d.Type() has fs.ModeSymlink) and never followed, dir itself
// included. d.Info() is the entry's own lstat data, taken relative to its
// parent directory's descriptor. fs.SkipDir and fs.SkipAll work as in
// fs.WalkDir. A directory swapped for something else during the walk is
// skipped and reported to fn with ErrOutsideRoot.
func (f *FS) Walk(dir string, fn fs.WalkDirFunc) error {
	return f.WalkContext(context.Background(), dir, fn)
}

// WalkContext is Walk that stops with ctx.Err() when ctx is done.
func (f *FS) WalkContext(ctx context.Context, dir string, fn fs.WalkDirFunc) error {
	rel, err := f.clean("walk", dir)
	if err != nil {
		return err
	}
	return f.s.walk(ctx, rel, fn)
}

func (s *state) walk(ctx context.Context, rel string, fn fs.WalkDirFunc) error {
	fi, err := s.root.Lstat(rel)
	if err != nil {
		err = fn(rel, nil, wrap("walk", rel, err))
	} else {
		err = s.walkDir(ctx, s.root, rel, rel, fs.FileInfoToDirEntry(fi), fn)
	}
	if err == fs.SkipDir || err == fs.SkipAll {
		return nil
	}
	return err
}

func (s *state) walkDir(ctx context.Context, parent *os.Root, base, rel string, d fs.DirEntry, fn fs.WalkDirFunc) error {
	if err := fn(rel, d, nil); err != nil || !d.IsDir() {
		if err == fs.SkipDir && d.IsDir() {
			err = nil
		}
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sub, dir, entries, err := openDir(parent, base, d)
	if err != nil {
		err = fn(rel, d, wrap("walk", rel, err))
		if err == fs.SkipDir {
			err = nil
		}
		return err
	}
	defer sub.Close()
	defer dir.Close()
	for _, e := range entries {
		child := e.Name()
		if rel != "." {
			child = rel + "/" + child
		}
		if err := s.walkDir(ctx, sub, e.Name(), child, walkEntry{e, sub, dir, s}, fn); err != nil {
			if err == fs.SkipDir {
				break
			}
			return err
		}
	}
	return nil
}

// openDir opens the directory base of parent as a new root and lists it,
// after checking that what was opened is the directory that was lstat-ed
// (d): a directory swapped for a link between the listing and the open is
// not walked into. dir is the directory itself, open while it is walked.
func openDir(parent *os.Root, base string, d fs.DirEntry) (*os.Root, *os.File, []fs.DirEntry, error) {
	want, err := d.Info()
	if err != nil {
		return nil, nil, nil, err
	}
	sub, err := parent.OpenRoot(base)
	if err != nil {
		return nil, nil, nil, err
	}
	got, err := sub.Stat(".")
	if err != nil {
		_ = sub.Close()
		return nil, nil, nil, err
	}
	if !sameFile(want, got) {
		_ = sub.Close()
		return nil, nil, nil, ErrOutsideRoot
	}
	dir, err := sub.Open(".")
	if err != nil {
		_ = sub.Close()
		return nil, nil, nil, err
	}
	entries, err := dir.ReadDir(-1)
	if err != nil {
		_ = dir.Close()
		_ = sub.Close()
		return nil, nil, nil, err
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return sub, dir, entries, nil
}

// walkEntry is an entry reported by Walk, with the directory it was listed
// in (open while fn runs for it) and the sandbox it belongs to.
type walkEntry struct {
	fs.DirEntry
	dir     *os.Root
	dirFile *os.File
	s       *state
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
	e, ok := d.(walkEntry)
	if !ok || e.s != f.s {
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
	crel, err := cleanWalked("read", rel)
	if err != nil {
		return 0, err
	}
	if !f.trusted {
		if dl := f.s.deny.Load(); dl != nil && dl.match(crel) {
			return 0, newErr("read", crel, ErrDenied)
		}
	}
	rc, err := e.dirFile.SyscallConn()
	if err != nil {
		return 0, wrap("read", crel, err)
	}
	var n int
	var rerr error
	if err := rc.Control(func(dfd uintptr) {
		fd, err := unix.Openat(int(dfd), e.Name(), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err != nil {
			rerr = err
			return
		}
		n, rerr = unix.Pread(fd, buf, 0)
		_ = unix.Close(fd)
	}); err != nil {
		return 0, wrap("read", crel, err)
	}
	if n < 0 {
		n = 0
	}
	return n, wrap("read", crel, rerr)
}

// OpenEntry opens for reading the entry d that Walk is reporting at rel, as
// Open(rel) does, but through the descriptor of the directory the walk
// listed it in: one openat instead of one per path component, which counts
// when archiving tens of thousands of files. It must be called from the
// walk's fn for that entry; any other d is opened by name.
func (f *FS) OpenEntry(rel string, d fs.DirEntry) (*File, error) {
	e, ok := d.(walkEntry)
	if !ok || e.s != f.s {
		return f.open("open", rel)
	}
	// The name is matched as it is (no link resolution: checkOpened below
	// checks the file actually opened, which covers any link on the way).
	if f.DeniedEntry(rel) {
		return nil, newErr("open", strings.TrimPrefix(rel, "/"), ErrDenied)
	}
	rel, err := cleanWalked("open", rel)
	if err != nil {
		return nil, err
	}
	// O_NONBLOCK, as in open: a FIFO swapped in for the listed file must
	// not hold the walk until a writer comes (callers refuse what is not a
	// regular file once it is open).
	file, err := e.dir.OpenFile(e.Name(), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, wrap("open", rel, err)
	}
	if err := f.checkOpened("open", rel, file); err != nil {
		_ = file.Close()
		return nil, err
	}
	return &File{f: file, s: f.s, rel: rel}, nil
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
	e, ok := d.(walkEntry)
	if !ok || e.s != f.s {
		return f.Lchown(rel, uid, gid)
	}
	crel, err := f.allowed(op, rel)
	if err != nil {
		return err
	}
	if fi, err := d.Info(); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok &&
			(uid < 0 || int(st.Uid) == uid) && (gid < 0 || int(st.Gid) == gid) {
			return nil
		}
	}
	rc, err := e.dirFile.SyscallConn()
	if err != nil {
		return wrap(op, crel, err)
	}
	var cerr error
	if err := rc.Control(func(dfd uintptr) {
		cerr = unix.Fchownat(int(dfd), e.Name(), uid, gid, unix.AT_SYMLINK_NOFOLLOW)
	}); err != nil {
		return wrap(op, crel, err)
	}
	return wrap(op, crel, cerr)
}
