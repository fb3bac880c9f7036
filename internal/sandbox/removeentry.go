package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/sandbox/internal/fdwalk"
)

// RemoveEntry removes the entry d that Walk is reporting at rel (a
// directory with everything below it; a link as a link) through the
// descriptor of the directory the walk listed it in: no path is resolved
// again, however deep the entry, and a directory on its way swapped for a
// link since is not followed. What it frees is released from the usage. A
// denied entry is refused (ErrDenied); for a directory, one holding a
// denied name too (see checkDenyTree). It must be called from the walk's
// fn for that entry, which should then return fs.SkipDir for a directory;
// any other d is removed by name (RemoveAll).
func (f *FS) RemoveEntry(ctx context.Context, rel string, d fs.DirEntry) error {
	e, ok := f.entryOf(d)
	if !ok {
		return f.RemoveAll(ctx, rel)
	}
	const op = "remove"
	rel = strings.TrimPrefix(rel, "/")
	if f.DeniedWalkEntry(rel, d) {
		return newErr(op, rel, ErrDenied)
	}
	if !e.IsDir() {
		// One unlinkat through the walked directory, charged as listed.
		freed, err := f.s.unlinkCharged(e.Entry, func() error { return unix.Unlinkat(e.Dir.FD(), e.Base, 0) })
		f.s.release(freed)
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return nil
		case !errors.Is(err, unix.EISDIR):
			return wrap(op, rel, err)
		}
		// Made a directory since it was listed: removed as one, below.
	}
	if err := f.checkDenyTree(ctx, op, rel, ""); err != nil {
		return err
	}
	// The walked directory as a root for removeTree, opened through the
	// process's own descriptor table: the same directory, not a path.
	parent, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(e.Dir.FD()))
	if err != nil {
		return wrap(op, rel, err)
	}
	defer parent.Close()
	if got, err := parent.Stat("."); err != nil || !isInode(got, e.Dir.ID()) {
		if err == nil {
			err = ErrOutsideRoot
		}
		return wrap(op, rel, err)
	}
	freed, err := f.s.removeTree(ctx, parent, e.Base)
	f.s.release(freed)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return wrapRemove(rel, err)
	}
	return nil
}

func isInode(fi fs.FileInfo, id fdwalk.Inode) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fdwalk.InodeOf(st) == id
}
