package backupview

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/sandbox"
)

// CopyOut restores p (a file, a link or a whole directory of a backup) to
// dst in the live tree of fsys: the restore a rename out of the view is.
// The backup is unchanged. dst must not exist (sandbox.ErrExist); its
// missing parents are created. The copy is checked against the disk limit
// before it starts and charged as it is written (sandbox.ErrNoSpace); the
// denylist applies to the backup's names (a denied file of a directory is
// left out, a denied file named alone refused) and to the destination. A
// copy that fails or whose ctx ends leaves nothing at dst. The caller holds
// the server's job slot.
func (v *View) CopyOut(ctx context.Context, fsys *sandbox.FS, server string, p Path, dst string) error {
	if p.Backup == "" {
		return ErrReadOnly
	}
	st, t, n, err := v.lookup(ctx, fsys, server, p)
	if err != nil {
		return err
	}
	if denied(fsys, n) {
		return sandbox.ErrDenied
	}
	if _, err := fsys.Lstat(dst); err == nil {
		return sandbox.ErrExist
	} else if !errors.Is(err, sandbox.ErrNotExist) {
		return err
	}
	if err := fsys.HasSpaceFor(t.bytesUnder(fsys, n)); err != nil {
		return err
	}
	if dir := path.Dir(path.Clean("/" + dst)); dir != "/" {
		if err := fsys.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	c := copier{ctx: ctx, fsys: fsys, st: st, t: t}
	if err := c.entry(n, dst); err != nil {
		// Nothing half-written stays (a failed copy of a directory
		// removes what it made).
		_ = fsys.RemoveAll(context.WithoutCancel(ctx), dst)
		return err
	}
	return nil
}

// bytesUnder is what copying n writes: its regular files' sizes, denied
// ones left out.
func (t *tree) bytesUnder(fsys Files, n *node) int64 {
	if !n.isDir() {
		return n.size
	}
	var total int64
	for _, k := range t.kids[n.rel] {
		if denied(fsys, t.resolve(k)) {
			continue
		}
		total += t.bytesUnder(fsys, t.resolve(k))
	}
	return total
}

type copier struct {
	ctx  context.Context
	fsys *sandbox.FS
	st   *chunkstore.Store
	t    *tree
}

func (c *copier) entry(n *node, dst string) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	switch {
	case n.isDir():
		return c.dir(n, dst)
	case n.mode&fs.ModeSymlink != 0:
		// Stored as a link, restored as a link (the sandbox confines it
		// when it is used; it is never followed here).
		return c.fsys.Symlink(n.link, dst)
	case n.hard != "":
		return nil // a later name whose first name is not in the backup
	}
	return c.file(n, dst)
}

func (c *copier) dir(n *node, dst string) error {
	if err := c.fsys.Mkdir(dst, 0o755); err != nil {
		return err
	}
	for _, k := range c.t.kids[n.rel] {
		r := c.t.resolve(k)
		if denied(c.fsys, r) {
			continue
		}
		if err := c.entry(r, dst+"/"+path.Base(k.rel)); err != nil {
			return err
		}
	}
	if err := c.fsys.Chmod(dst, n.mode.Perm()); err != nil {
		return err
	}
	return c.fsys.Chtimes(dst, n.mtime, n.mtime)
}

func (c *copier) file(n *node, dst string) error {
	f, err := openFile(c.st, c.t, n, infoOf(n))
	if err != nil {
		return err
	}
	defer f.Close()
	out, err := c.fsys.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	src := sandbox.ContextReader(c.ctx, io.NewSectionReader(f, 0, f.Size()))
	_, err = io.Copy(out, src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := c.fsys.Chmod(dst, n.mode.Perm()); err != nil {
		return err
	}
	return c.fsys.Chtimes(dst, n.mtime, n.mtime)
}
