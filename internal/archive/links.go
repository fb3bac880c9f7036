package archive

import (
	"archive/tar"
	"io/fs"
	"syscall"
)

// Hard links (issue 33, item 6). Write stores the first name of a file with
// more than one name (same device and inode, link count above 1) as a
// regular file and every later name met in the same archive as a hard-link
// entry (tar TypeLink) naming it: the content is stored once. In the
// backup layout the link entries go to the tree trailer with the
// directories and symbolic links, so that a reader that stops at the first
// end-of-archive marker (Wings' restore) never writes them as empty files
// (docs/compatibility.md). Extract makes them hard links again
// (extract_links.go).

// maxLinkNames bounds the first names Write remembers; past it, later
// names of other files are stored as copies again.
const maxLinkNames = 1 << 20

// inode identifies a file on the node.
type inode struct{ dev, ino uint64 }

// multiLinked returns fi's inode when the file has more than one name.
func multiLinked(fi fs.FileInfo) (inode, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Nlink < 2 {
		return inode{}, false
	}
	return inode{uint64(st.Dev), st.Ino}, true
}

// rememberLink records rel as the stored name of fi's inode.
func (wr *writer) rememberLink(rel string, fi fs.FileInfo) {
	id, ok := multiLinked(fi)
	if !ok || len(wr.links) >= maxLinkNames {
		return
	}
	if _, seen := wr.links[id]; !seen {
		wr.links[id] = rel
	}
}

// writeLink writes rel as a hard link to the stored first name of fi's
// inode; done is false when it has none (rel is then stored as a file).
func (wr *writer) writeLink(rel string, fi fs.FileInfo) (done bool, err error) {
	id, ok := multiLinked(fi)
	if !ok {
		return false, nil
	}
	first, ok := wr.links[id]
	if !ok {
		return false, nil
	}
	hdr := header(rel, fi)
	hdr.Typeflag = tar.TypeLink
	hdr.Linkname = first
	if err := wr.meta.WriteHeader(hdr); err != nil {
		return true, err
	}
	wr.res.Links++
	report(wr.opts.Progress, &wr.res, wr.out)
	return true, nil
}
