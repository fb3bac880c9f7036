package archive

import (
	"archive/tar"
	"errors"
	"io/fs"
	"syscall"

	"github.com/wharf/wharf/internal/sandbox"
)

// remember records the file f (just written) as a possible hard-link
// target of later entries; past maxLinkNames files, none is recorded.
func (x *extractor) remember(f *sandbox.File) {
	if len(x.made) >= maxLinkNames {
		return
	}
	fi, err := f.Stat()
	if err != nil {
		return
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		x.made[inode{uint64(st.Dev), st.Ino}] = struct{}{}
	}
}

// hardlink makes rel a hard link to target, which must be a regular file
// this archive wrote earlier (still the same file: checked by its inode)
// and lie inside the root (the sandbox resolves both names there and never
// follows a link). Where the filesystem refuses the link (another device,
// too many links, a protected file), rel is a copy, written and charged
// against the disk limit as any file.
func (x *extractor) hardlink(rel, target string, hdr *tar.Header) error {
	fi, err := x.dst.Lstat(target)
	// Past maxLinkNames recorded files, any regular file of the root may
	// be the target, as before hard links were links.
	if err != nil || !fi.Mode().IsRegular() || (!x.madeHere(fi) && len(x.made) < maxLinkNames) {
		return x.unsafe(hdr.Name)
	}
	d, base, err := x.parent(rel)
	if err != nil {
		return err
	}
	if rel == target {
		return nil
	}
	if _, err := x.clear(d, rel, base, false, false); err != nil {
		return err
	}
	delete(x.links, rel)
	err = x.dst.Link(target, rel)
	if errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EMLINK) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOTSUP) {
		err = x.dst.CopyContext(x.ctx, target, rel)
		if err == nil {
			_ = d.Lchtimes(base, fi.ModTime(), fi.ModTime())
		}
	}
	if err != nil {
		return x.wrap(rel, err)
	}
	x.res.Files++
	x.res.Links++
	return nil
}

// madeHere reports whether fi is a file this extraction wrote.
func (x *extractor) madeHere(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	_, ok = x.made[inode{uint64(st.Dev), st.Ino}]
	return ok
}
