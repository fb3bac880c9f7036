// Package sandbox is the confined filesystem of one server: every file
// operation on a server's files goes through an *FS, which resolves names
// inside the server's root directory and never follows a symbolic link out
// of it.
//
// Confinement is the standard library's os.Root (each name is resolved
// relative to an open directory descriptor, component by component, so
// check/use races cannot redirect an operation out of the root). On top of
// it the package adds:
//
//   - lexical cleaning of panel names: "/plugins/x.jar" means
//     <root>/plugins/x.jar; ".." that would climb above the root is
//     ErrOutsideRoot (never clamped);
//   - operations that act on a symbolic link itself and never its target
//     (Remove, RemoveAll, Rename, Lchown, Lchtimes, Lstat, Walk);
//   - the egg's file denylist (gitignore syntax), checked on the name as
//     given and on the name it resolves to through in-root links, for
//     opened files on the file actually opened (from its descriptor), and
//     for a directory renamed, removed or chmod-ed on every entry below it;
//   - disk accounting against a limit enforced while bytes are written;
//   - ownership and modes for new files (0644) and directories (0755);
//   - errors that name only the relative path (never a host path).
//
// Symbolic links that stay inside the root keep working.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/sandbox/internal/fdwalk"
)

// Options configure an FS.
type Options struct {
	// UID and GID own every file, directory and link the FS creates; -1
	// leaves the id as the process makes it.
	UID, GID int
	// Denylist is the egg's file_denylist in gitignore syntax. Denied names
	// cannot be read (Open, ReadFile, Copy source) or changed in any way
	// (create, write, mkdir, rename either end, copy target, remove, chmod,
	// chown, chtimes, symlink), nor through a directory above them (rename,
	// RemoveAll and chmod of an ancestor: see checkDenyTree). Metadata (Stat, Lstat, ReadDir, Walk,
	// Readlink) is not denied, so that the file manager still lists them.
	// The Trusted view skips it.
	Denylist []string
	// DiskLimit is the server's disk space in bytes: 0 means unlimited and
	// -1 means no writes at all. SetDiskLimit changes it at run time.
	DiskLimit int64
}

// state is shared by an FS and its views.
type state struct {
	root     *os.Root
	rootDir  *os.File // the root directory itself, for /proc lookups
	hostPath string
	uid, gid int

	deny  atomic.Pointer[denylist]
	limit atomic.Int64
	used  atomic.Int64
	open  openTable // inodes open for writing through our handles

	refreshMu sync.Mutex
	rootPath  atomic.Pointer[string] // host path of rootDir, as /proc shows it

	ahead fdwalk.Tuning // how walks list ahead (fdwalk); set by New
}

// FS is the confined filesystem of one server. It is safe for concurrent
// use. A *File it returns is not.
type FS struct {
	s       *state
	trusted bool
	view    bool
}

// New opens (creating it with mode 0700 when missing) the directory root as
// a sandbox. The cached usage starts at 0: call RefreshUsage to compute it.
func New(root string, opts Options) (*FS, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, wrap("open root", ".", err)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, wrap("open root", ".", err)
	}
	d, err := r.Open(".")
	if err != nil {
		_ = r.Close()
		return nil, wrap("open root", ".", err)
	}
	s := &state{root: r, rootDir: d, hostPath: root, uid: opts.UID, gid: opts.GID, ahead: fdwalk.DefaultTuning()}
	s.deny.Store(compileDenylist(opts.Denylist))
	s.limit.Store(opts.DiskLimit)
	return &FS{s: s}, nil
}

// Close releases the root. Closing a view (Trusted) does nothing.
func (f *FS) Close() error {
	if f.view {
		return nil
	}
	err1 := f.s.rootDir.Close()
	err2 := f.s.root.Close()
	if err := errors.Join(err1, err2); err != nil {
		return wrap("close", ".", err)
	}
	return nil
}

// Root returns the host path of the root directory. It is meant for the
// container mount; never put it in a message shown to a user.
func (f *FS) Root() string { return f.s.hostPath }

// Trusted returns a view of the same root, sharing usage and disk limit,
// that skips the denylist. It is for operations the agent itself drives
// with content it trusts as to names (backup restore and transfer
// extraction, egg configuration rewriting): confinement, the disk limit and
// ownership still apply. Never hand it a name chosen by a user request.
func (f *FS) Trusted() *FS { return &FS{s: f.s, trusted: true, view: true} }

// SetDenylist replaces the denylist (after an egg change).
func (f *FS) SetDenylist(lines []string) { f.s.deny.Store(compileDenylist(lines)) }

// SetDiskLimit changes the disk limit (0 unlimited, -1 no writes).
func (f *FS) SetDiskLimit(limit int64) { f.s.limit.Store(limit) }

// DiskLimit returns the disk limit in bytes.
func (f *FS) DiskLimit() int64 { return f.s.limit.Load() }

// Denied reports whether a user may not read or change name because of the
// denylist (always false on the Trusted view). Archivers use it to skip
// denied files.
func (f *FS) Denied(name string) bool {
	// Not held to the path limits: it answers for names walks report (a
	// tree the game made deeper than them), and an operation on a name a
	// user sent checks the limits itself.
	rel, err := cleanWalked("check", name)
	if err != nil {
		return true
	}
	return f.checkDeny("check", rel) != nil
}

// DeniedEntry is Denied for an entry Walk reports at rel: the name is
// matched as it is, without resolving links on it (Walk never follows one
// below the directory it walks), so it costs no system call.
func (f *FS) DeniedEntry(rel string) bool { return f.deniedWalked(rel) }

// checkDeny refuses rel when it, or the name it resolves to through
// in-root symbolic links, is denied.
func (f *FS) checkDeny(op, rel string) error {
	if f.trusted {
		return nil
	}
	d := f.s.deny.Load()
	if d == nil {
		return nil
	}
	if d.match(rel) {
		return newErr(op, rel, ErrDenied)
	}
	if res, ok := f.s.resolve(rel); ok && res != rel && d.match(res) {
		return newErr(op, rel, ErrDenied)
	}
	return nil
}

// allowed cleans a user-given name and checks it against the denylist: the
// first step of every operation that reads contents or changes anything.
func (f *FS) allowed(op, name string) (string, error) {
	rel, err := f.clean(op, name)
	if err != nil {
		return "", err
	}
	if err := f.checkDeny(op, rel); err != nil {
		return "", err
	}
	return rel, nil
}

// checkOpened refuses an opened file whose real name is denied. This is the
// race-free check: it looks at the file the descriptor refers to.
func (f *FS) checkOpened(op, rel string, file *os.File) error {
	if f.trusted {
		return nil
	}
	d := f.s.deny.Load()
	if d == nil {
		return nil
	}
	real, ok := f.s.fdRel(file)
	if !ok || d.match(real) {
		return newErr(op, rel, ErrDenied)
	}
	return nil
}

func (s *state) chown(rel string) {
	if s.uid < 0 && s.gid < 0 {
		return
	}
	_ = s.root.Lchown(rel, s.uid, s.gid)
}

func (s *state) fchown(file *os.File) {
	if s.uid < 0 && s.gid < 0 {
		return
	}
	_ = file.Chown(s.uid, s.gid)
}

// ---- reading ----

// Open opens name for reading.
func (f *FS) Open(name string) (*File, error) {
	return f.open("open", name)
}

func (f *FS) open(op, name string) (*File, error) {
	rel, err := f.allowed(op, name)
	if err != nil {
		return nil, err
	}
	// O_NONBLOCK: opening a FIFO for reading must not wait for a writer
	// (the callers refuse non-regular files once they have it open).
	file, err := f.s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, wrap(op, rel, err)
	}
	if err := f.checkOpened(op, rel, file); err != nil {
		_ = file.Close()
		return nil, err
	}
	return &File{f: file, s: f.s, rel: rel}, nil
}

// ReadFile reads a whole file of at most limit bytes (ErrTooLarge beyond;
// limit <= 0 means no limit).
func (f *FS) ReadFile(name string, limit int64) ([]byte, error) {
	file, err := f.open("read", name)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	// A FIFO whose writer stays silent would hold the read: regular files only.
	if fi, err := file.Stat(); err != nil {
		return nil, err
	} else if fi.IsDir() {
		return nil, newErr("read", file.rel, ErrIsDir)
	} else if !fi.Mode().IsRegular() {
		return nil, newErr("read", file.rel, ErrNotRegular)
	}
	var r io.Reader = file
	if limit > 0 {
		r = io.LimitReader(file, limit+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, wrap("read", file.rel, err)
	}
	if limit > 0 && int64(len(b)) > limit {
		return nil, newErr("read", file.rel, ErrTooLarge)
	}
	return b, nil
}

// Stat returns the FileInfo of name, following symbolic links that stay
// inside the root.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	rel, err := f.clean("stat", name)
	if err != nil {
		return nil, err
	}
	fi, err := f.s.root.Stat(rel)
	return fi, wrap("stat", rel, err)
}

// Lstat returns the FileInfo of name without following a final symbolic link.
func (f *FS) Lstat(name string) (fs.FileInfo, error) {
	rel, err := f.clean("lstat", name)
	if err != nil {
		return nil, err
	}
	fi, err := f.s.root.Lstat(rel)
	return fi, wrap("lstat", rel, err)
}

// Readlink returns the stored target of the symbolic link name (data only:
// it may name anything, and nothing is resolved through it).
func (f *FS) Readlink(name string) (string, error) {
	rel, err := f.clean("readlink", name)
	if err != nil {
		return "", err
	}
	t, err := f.s.root.Readlink(rel)
	return t, wrap("readlink", rel, err)
}

// ReadDir lists the directory name, sorted by name. Entries describe the
// entries themselves (a symbolic link is reported as a link).
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	rel, err := f.clean("readdir", name)
	if err != nil {
		return nil, err
	}
	d, err := f.s.root.Open(rel)
	if err != nil {
		return nil, wrap("readdir", rel, err)
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, wrap("readdir", rel, err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

// ---- writing ----

func isWrite(flag int) bool {
	return flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) != 0
}

// Create creates or truncates name for writing (mode 0644 when created).
func (f *FS) Create(name string) (*File, error) {
	return f.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
}

// OpenFile opens name with the os.O_* flags. A file opened for writing
// enforces the disk limit on every write (ErrNoSpace mid-stream), and a new
// file gets mode perm (0644 when perm is 0, regardless of umask) and the
// configured owner. When the limit is -1, opening for writing is refused.
// O_CREATE never creates a file through a symbolic link, even one whose
// missing target would lie inside the root (that gives ErrNotExist; a link
// leading out gives ErrOutsideRoot): creation happens with O_EXCL first.
func (f *FS) OpenFile(name string, flag int, perm fs.FileMode) (*File, error) {
	const op = "open"
	if !isWrite(flag) {
		return f.open(op, name)
	}
	rel, err := f.clean(op, name)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return nil, newErr(op, rel, ErrIsDir)
	}
	if err := f.checkDeny(op, rel); err != nil {
		return nil, err
	}
	if f.s.limit.Load() < 0 {
		return nil, newErr(op, rel, ErrNoSpace)
	}
	if perm == 0 {
		perm = 0o644
	}
	perm &= fs.ModePerm
	// O_NONBLOCK: a FIFO must not hold the open until a reader comes (with
	// none, the kernel answers ENXIO); whatever is not a regular file is
	// refused once open, before anything is truncated or written. On a
	// regular file the flag changes nothing.
	base := flag&^(os.O_CREATE|os.O_EXCL|os.O_TRUNC) | syscall.O_NONBLOCK
	var file *os.File
	created := false
	if flag&os.O_CREATE != 0 {
		file, created, err = f.s.createCharged(rel, base, flag&os.O_EXCL != 0, perm)
	} else {
		file, err = f.s.root.OpenFile(rel, base, 0)
	}
	if errors.Is(err, syscall.ENXIO) {
		return nil, newErr(op, rel, ErrNotRegular)
	}
	if err != nil {
		return nil, wrap(op, rel, err)
	}
	if err := f.checkOpened(op, rel, file); err != nil {
		_ = file.Close()
		if created {
			_ = f.s.root.Remove(rel)
			f.s.release(blockSize)
		}
		return nil, err
	}
	fi, err := file.Stat()
	if err != nil {
		_ = file.Close()
		return nil, wrap(op, rel, err)
	}
	if fi.IsDir() {
		_ = file.Close()
		return nil, newErr(op, rel, ErrIsDir)
	}
	if !fi.Mode().IsRegular() {
		_ = file.Close()
		return nil, newErr(op, rel, ErrNotRegular)
	}
	if created {
		_ = file.Chmod(perm)
		f.s.fchown(file)
	}
	w, err := f.s.track(file, rel, flag&os.O_APPEND != 0, created)
	if err != nil {
		_ = file.Close()
		return nil, wrap(op, rel, err)
	}
	if !created && flag&os.O_TRUNC != 0 && fi.Size() > 0 {
		if err := w.Truncate(0); err != nil {
			_ = w.Close()
			return nil, err
		}
	}
	return w, nil
}

// createCharged opens rel for OpenFile with O_CREATE: it creates the file
// exclusively when there is room for one more entry (one block), and
// otherwise (the name exists, and excl is not asked) opens the existing
// file, which costs no new entry: a server at its limit can still open a
// file to shrink it.
func (s *state) createCharged(rel string, base int, excl bool, perm fs.FileMode) (*os.File, bool, error) {
	err := s.reserveEntry()
	if err == nil {
		file, cerr := s.root.OpenFile(rel, base|os.O_CREATE|os.O_EXCL, perm)
		if cerr == nil {
			return file, true, nil
		}
		s.release(blockSize)
		err = cerr
		if !errors.Is(err, fs.ErrExist) {
			return nil, false, err
		}
	}
	if excl {
		return nil, false, err
	}
	file, oerr := s.root.OpenFile(rel, base, 0)
	if oerr != nil && errors.Is(oerr, fs.ErrNotExist) && errors.Is(err, ErrNoSpace) {
		return nil, false, err
	}
	return file, false, oerr
}

// WriteFileAtomic writes r to name through a temporary file in the same
// directory that is synced and then renamed over name: name holds either
// its old content or all of the new, never part of it. On any error
// (including ErrNoSpace mid-stream) the temporary file is removed. A
// symbolic link at name is replaced by the file, never written through.
func (f *FS) WriteFileAtomic(name string, r io.Reader, perm fs.FileMode) error {
	rel, err := f.clean("write", name)
	if err != nil {
		return err
	}
	return f.writeAtomic("write", rel, r, perm, true)
}

func (f *FS) writeAtomic(op, rel string, r io.Reader, perm fs.FileMode, replace bool) (err error) {
	if rel == "." {
		return newErr(op, rel, ErrIsDir)
	}
	if err := f.checkDeny(op, rel); err != nil {
		return err
	}
	if f.s.limit.Load() < 0 {
		return newErr(op, rel, ErrNoSpace)
	}
	if perm == 0 {
		perm = 0o644
	}
	perm &= fs.ModePerm
	dir, base := split(rel)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmpRel := base
	if len(tmpRel) > 200 {
		tmpRel = tmpRel[:200]
	}
	tmpRel = "." + tmpRel + ".wharf-tmp-" + hex.EncodeToString(rnd[:])
	if dir != "." {
		tmpRel = dir + "/" + tmpRel
	}
	if err := f.s.reserveEntry(); err != nil {
		return newErr(op, rel, ErrNoSpace)
	}
	tmp, err := f.s.root.OpenFile(tmpRel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		f.s.release(blockSize)
		return wrap(op, rel, err)
	}
	w, err := f.s.track(tmp, rel, false, true)
	if err != nil {
		_ = tmp.Close()
		_ = f.s.root.Remove(tmpRel)
		return wrap(op, rel, err)
	}
	done := false
	defer func() {
		if !done {
			_ = w.Close()
			f.s.removeCharged(tmpRel)
		}
	}()
	if _, err := io.Copy(w, r); err != nil {
		return wrap(op, rel, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return wrap(op, rel, err)
	}
	f.s.fchown(tmp)
	if err := tmp.Sync(); err != nil {
		return wrap(op, rel, err)
	}
	if err := w.Close(); err != nil {
		return wrap(op, rel, err)
	}
	if replace {
		rename := func() error { return f.s.root.Rename(tmpRel, rel) }
		if old, err := f.s.root.Lstat(rel); err == nil {
			freed, err := f.s.unlinkCharged(old, rename)
			if err != nil {
				return wrap(op, rel, err)
			}
			f.s.release(freed)
		} else if err := rename(); err != nil {
			return wrap(op, rel, err)
		}
	} else {
		// Link refuses an existing target atomically (EEXIST).
		if err := f.s.root.Link(tmpRel, rel); err != nil {
			return wrap(op, rel, err)
		}
		f.s.removeCharged(tmpRel)
	}
	done = true
	if d, err := f.s.root.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// Mkdir creates the directory name (its parent must exist; ErrExist when
// it does).
func (f *FS) Mkdir(name string, perm fs.FileMode) error {
	const op = "mkdir"
	rel, err := f.clean(op, name)
	if err != nil {
		return err
	}
	if rel == "." {
		return newErr(op, rel, ErrExist)
	}
	if err := f.checkDeny(op, rel); err != nil {
		return err
	}
	if f.s.limit.Load() < 0 {
		return newErr(op, rel, ErrNoSpace)
	}
	if perm == 0 {
		perm = 0o755
	}
	perm &= fs.ModePerm
	if err := f.s.mkdirCharged(rel, perm); err != nil {
		return wrap(op, rel, err)
	}
	_ = f.s.root.Chmod(rel, perm)
	f.s.chown(rel)
	return nil
}

// MkdirAll creates name and any missing parents (mode perm, 0755 when 0,
// owned by the configured owner). Existing directories, and in-root links
// to directories, are accepted.
func (f *FS) MkdirAll(name string, perm fs.FileMode) error {
	rel, err := f.clean("mkdir", name)
	if err != nil {
		return err
	}
	return f.mkdirAll(rel, perm)
}

func (f *FS) mkdirAll(rel string, perm fs.FileMode) error {
	const op = "mkdir"
	if rel == "." {
		return nil
	}
	if err := f.checkDeny(op, rel); err != nil {
		return err
	}
	if f.s.limit.Load() < 0 {
		return newErr(op, rel, ErrNoSpace)
	}
	if perm == 0 {
		perm = 0o755
	}
	perm &= fs.ModePerm
	return wrap(op, rel, f.s.mkdirDown(rel, perm))
}

// Rename moves oldname to newname, creating newname's missing parent
// directories. It refuses an existing newname (ErrExist) and the root
// itself. A symbolic link is moved as a link. A directory holding a denied
// name, or whose entries would get one, is refused (see checkDenyTree).
func (f *FS) Rename(oldname, newname string) error {
	return f.RenameContext(context.Background(), oldname, newname)
}

// RenameContext is Rename whose denylist walk of a directory stops with ctx.
func (f *FS) RenameContext(ctx context.Context, oldname, newname string) error {
	const op = "rename"
	oldRel, err := f.clean(op, oldname)
	if err != nil {
		return err
	}
	newRel, err := f.clean(op, newname)
	if err != nil {
		return err
	}
	if oldRel == "." || newRel == "." {
		return newErr(op, oldRel, ErrInvalid)
	}
	if err := f.checkDeny(op, oldRel); err != nil {
		return err
	}
	if err := f.checkDeny(op, newRel); err != nil {
		return err
	}
	if _, err := f.s.root.Lstat(newRel); err == nil {
		return newErr(op, newRel, ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return wrap(op, newRel, err)
	}
	if err := f.checkDenyTree(ctx, op, oldRel, newRel); err != nil {
		return err
	}
	if dir, _ := split(newRel); dir != "." {
		if _, err := f.s.root.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			if err := f.mkdirAll(dir, 0); err != nil {
				return err
			}
		}
	}
	return wrap(op, oldRel, f.s.root.Rename(oldRel, newRel))
}

// Remove removes a file, an empty directory or a symbolic link (the link,
// never its target).
func (f *FS) Remove(name string) error {
	const op = "remove"
	rel, err := f.clean(op, name)
	if err != nil {
		return err
	}
	if rel == "." {
		return newErr(op, rel, ErrInvalid)
	}
	if err := f.checkDeny(op, rel); err != nil {
		return err
	}
	fi, err := f.s.root.Lstat(rel)
	if err != nil {
		return wrap(op, rel, err)
	}
	freed, err := f.s.unlinkCharged(fi, func() error { return f.s.root.Remove(rel) })
	if err != nil {
		return wrap(op, rel, err)
	}
	f.s.release(freed)
	return nil
}

// RemoveAll removes name and everything below it; a symbolic link is
// removed as a link. A missing name is not an error. RemoveAll of the root
// ("/" or "") empties the root and keeps the directory. ctx is checked before
// each entry: a cancelled removal stops with ctx.Err() and leaves part of
// the tree (what was removed is released from the usage). A directory
// holding a denied name is refused whole (see checkDenyTree).
func (f *FS) RemoveAll(ctx context.Context, name string) error {
	const op = "remove"
	rel, err := f.allowed(op, name)
	if err != nil {
		return err
	}
	if err := f.checkDenyTree(ctx, op, rel, ""); err != nil {
		return err
	}
	if rel == "." {
		freed, err := f.s.removeChildren(ctx, f.s.root)
		if err != nil {
			f.s.release(freed)
			return wrapRemove(rel, err)
		}
		f.s.used.Store(f.s.unlinkedOpenBytes())
		return nil
	}
	dir, base := split(rel)
	parent := f.s.root
	if dir != "." {
		parent, err = f.s.root.OpenRoot(dir)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		if err != nil {
			return wrap(op, rel, err)
		}
		defer parent.Close()
	}
	freed, err := f.s.removeTree(ctx, parent, base)
	f.s.release(freed)
	return wrapRemove(rel, err)
}

// wrapRemove is wrap for RemoveAll, keeping a context's error as it is.
func wrapRemove(rel string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return wrap("remove", rel, err)
}

// Chmod changes the permission bits of name itself. A final symbolic link
// is never followed (GHSA-rhq6-9rgh-v45c: chmod through a link changed host
// files): chmod of a link is ErrInvalid, whatever it points to. Parent
// links inside the root are followed. Only the 0777 bits are kept: setuid,
// setgid and sticky are dropped. A directory holding a denied name is
// refused (see checkDenyTree): its mode decides who reaches that name.
func (f *FS) Chmod(name string, mode fs.FileMode) error {
	return f.ChmodContext(context.Background(), name, mode)
}

// ChmodContext is Chmod whose denylist walk of a directory stops with ctx.
func (f *FS) ChmodContext(ctx context.Context, name string, mode fs.FileMode) error {
	const op = "chmod"
	rel, err := f.allowed(op, name)
	if err != nil {
		return err
	}
	if err := f.checkDenyTree(ctx, op, rel, ""); err != nil {
		return err
	}
	perm := uint32(mode & fs.ModePerm)
	if rel == "." {
		return wrap(op, rel, f.s.root.Chmod(rel, fs.FileMode(perm)))
	}
	err = f.s.atParent(rel, func(fd int, base string) error {
		return fchmodNoFollow(fd, base, perm)
	})
	if err == ErrInvalid {
		return newErr(op, rel, ErrInvalid)
	}
	return wrap(op, rel, err)
}

// Lchown changes the owner of name itself (a link, not its target).
func (f *FS) Lchown(name string, uid, gid int) error {
	const op = "chown"
	rel, err := f.allowed(op, name)
	if err != nil {
		return err
	}
	return wrap(op, rel, f.s.root.Lchown(rel, uid, gid))
}

// Chown changes the owner of name, following in-root links.
func (f *FS) Chown(name string, uid, gid int) error {
	const op = "chown"
	rel, err := f.allowed(op, name)
	if err != nil {
		return err
	}
	return wrap(op, rel, f.s.root.Chown(rel, uid, gid))
}

// Chtimes changes the access and modification times of name, following
// in-root links (a link leading out of the root is refused).
func (f *FS) Chtimes(name string, atime, mtime time.Time) error {
	const op = "chtimes"
	rel, err := f.allowed(op, name)
	if err != nil {
		return err
	}
	return wrap(op, rel, f.s.root.Chtimes(rel, atime, mtime))
}

// Lchtimes changes the times of name itself (a link, not its target).
func (f *FS) Lchtimes(name string, atime, mtime time.Time) error {
	const op = "chtimes"
	rel, err := f.allowed(op, name)
	if err != nil {
		return err
	}
	if rel == "." {
		return wrap(op, rel, f.s.root.Chtimes(rel, atime, mtime))
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return wrap(op, rel, f.s.atParent(rel, func(fd int, base string) error {
		return unix.UtimesNanoAt(fd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
	}))
}

// atParent runs fn with a descriptor of rel's parent directory (in-root
// links on the way are followed) and rel's last component, for the
// operations that must act on an entry itself and never resolve it by
// name through the root a second time.
func (s *state) atParent(rel string, fn func(dirfd int, base string) error) error {
	dir, base := split(rel)
	d, err := s.root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	rc, err := d.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd), base) }); err != nil {
		return err
	}
	return ferr
}

// Symlink creates the symbolic link name with the given target. The target
// is stored as data (archives may hold any link); nothing is ever resolved
// through it out of the root.
func (f *FS) Symlink(target, name string) error {
	const op = "symlink"
	rel, err := f.clean(op, name)
	if err != nil {
		return err
	}
	if rel == "." {
		return newErr(op, rel, ErrExist)
	}
	if target == "" || strings.IndexByte(target, 0) >= 0 {
		return newErr(op, rel, ErrInvalid)
	}
	if err := f.checkDeny(op, rel); err != nil {
		return err
	}
	if f.s.limit.Load() < 0 {
		return newErr(op, rel, ErrNoSpace)
	}
	if err := f.s.symlinkCharged(target, rel); err != nil {
		return wrap(op, rel, err)
	}
	f.s.chown(rel)
	return nil
}

// Copy copies the regular file src to dst, which must not exist (ErrExist):
// the caller chooses the name of the copy. The copy has src's permission
// bits and the configured owner, counts against the disk limit while it is
// written, and appears whole or not at all.
func (f *FS) Copy(src, dst string) error { return f.CopyContext(context.Background(), src, dst) }

// CopyContext is Copy that stops (removing the partial copy) with ctx.Err()
// when ctx ends, checked before every chunk.
func (f *FS) CopyContext(ctx context.Context, src, dst string) error {
	const op = "copy"
	dstRel, err := f.clean(op, dst)
	if err != nil {
		return err
	}
	if err := f.checkDeny(op, dstRel); err != nil {
		return err
	}
	in, err := f.open(op, src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return newErr(op, in.rel, ErrIsDir)
	}
	if !fi.Mode().IsRegular() {
		return newErr(op, in.rel, ErrInvalid)
	}
	if err := f.HasSpaceFor(fi.Size()); err != nil {
		return newErr(op, dstRel, ErrNoSpace)
	}
	return f.writeAtomic(op, dstRel, ctxReader{ctx, in}, fi.Mode().Perm(), false)
}

// ---- disk usage ----

// Usage returns the cached disk usage in bytes (the last RefreshUsage plus
// what was written and removed through the FS since). It never blocks.
func (f *FS) Usage() int64 { return f.s.used.Load() }

// RefreshUsage walks the root (never following symbolic links, counting a
// file with several hard links once, counting every entry's allocated
// blocks and at least one 4 KiB block per entry, see accounting.go), adds
// the files that were removed but are still open through our handles,
// stores the result as the cached usage and returns it. Writes that happen
// during the walk may be counted twice or not at all until the next
// refresh. Concurrent calls are serialised.
//
// A directory that cannot be read (the daemon out of descriptors, a
// directory the daemon may not list) cannot be left out silently: the
// error names it, and the usage stored is at least the limit plus one byte,
// so that the server counts as over its limit until a walk reads it all.
func (f *FS) RefreshUsage(ctx context.Context) (int64, error) {
	f.s.refreshMu.Lock()
	defer f.s.refreshMu.Unlock()
	n, err := f.s.du(ctx, ".")
	if err != nil && ctx.Err() != nil {
		return f.s.used.Load(), err
	}
	n += f.s.unlinkedOpenBytes()
	if lim := f.s.limit.Load(); err != nil && lim > 0 {
		n = max(n, lim+1)
	}
	f.s.used.Store(n)
	return n, err
}

// CountEntries returns how many entries (files, directories, links, one
// per name) the root holds, read from the directory records alone: far
// cheaper than RefreshUsage, which stats every entry. It walks as
// RefreshUsage does (bounded descriptors whatever the depth, no link
// followed); a directory it cannot list makes it return what it counted
// with an error naming that directory. It changes nothing.
func (f *FS) CountEntries(ctx context.Context) (int64, error) {
	return f.s.countEntries(ctx, ".")
}

// HasSpaceFor returns ErrNoSpace when delta more bytes would exceed the
// disk limit, or when the limit is -1.
func (f *FS) HasSpaceFor(delta int64) error {
	lim := f.s.limit.Load()
	if lim < 0 {
		return ErrNoSpace
	}
	if lim > 0 && delta > 0 && f.s.used.Load()+delta > lim {
		return ErrNoSpace
	}
	return nil
}

// reserve adds n bytes to the usage, or fails with ErrNoSpace if that
// would cross the limit.
func (s *state) reserve(n int64) error {
	if n <= 0 {
		return nil
	}
	for {
		lim := s.limit.Load()
		if lim < 0 {
			return ErrNoSpace
		}
		cur := s.used.Load()
		if lim > 0 && cur+n > lim {
			return ErrNoSpace
		}
		if s.used.CompareAndSwap(cur, cur+n) {
			return nil
		}
	}
}

func (s *state) release(n int64) {
	if n <= 0 {
		return
	}
	for {
		cur := s.used.Load()
		nv := cur - n
		if nv < 0 {
			nv = 0
		}
		if s.used.CompareAndSwap(cur, nv) {
			return
		}
	}
}
