package transfer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/wharf/wharf/internal/archive"
	"io"
	"io/fs"
	"path"
	"syscall"

	"github.com/wharf/wharf/internal/sandbox"
)

// Wire version 4 (issue 33, items 5 and 6; docs/live-transfers.md §6):
//
//   - a sparse file record ('S') carries a file as its data extents: the
//     source finds them with SEEK_DATA/SEEK_HOLE and reads only them; the
//     target writes each at its offset and sets the size, so the holes
//     stay holes and only the data is charged against the disk limit;
//   - a hard link record ('H') names a further name of a file the stream
//     already wrote in the same pass: the target makes a hard link inside
//     the server's root, only to a path it wrote and still holds.

// hashExtentHead adds an extent's offset and length (8 bytes each,
// big-endian) to the running hash of a sparse file record, before its
// bytes: the record's hash covers where each range lies, not only its data.
func hashExtentHead(h io.Writer, off, n int64) {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(off))
	binary.BigEndian.PutUint64(b[8:], uint64(n))
	_, _ = h.Write(b[:])
}

// holey reports whether the file fi allocates fewer bytes than its size
// (it may have holes).
func holey(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Blocks*512 < fi.Size()
}

// dataSize is what a version-4 source sends of the file fi: its size, or
// what it allocates when that is less (it has holes).
func dataSize(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks*512 < fi.Size() {
		return st.Blocks * 512
	}
	return fi.Size()
}

// nlink is fi's number of names (1 when unknown).
func nlink(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// fileID identifies a file of the source's tree (same device and inode).
type fileID struct{ dev, ino uint64 }

// multiName returns fi's identity when the file has more than one name.
func multiName(fi fs.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Nlink < 2 {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), st.Ino}, true
}

// maxHardLinks bounds the hard link records of one stream: a name costs
// the target no disk block (a link is not charged against the disk limit)
// but an entry in its table of received files (section 5 of
// docs/live-transfers.md), so the names a peer can make are bounded here
// (~100 bytes each at most: ~26 MiB). A source sends further names past it
// as files.
const maxHardLinks = 1 << 18

// maxFirstNames bounds the first names of multi-named files a pass
// remembers; past it, further names are sent as files of their own.
const maxFirstNames = 1 << 20

// rememberFirst records rel, just sent as a file, as the first name of
// its file in this pass (when it has several names).
func (ls *liveSender) rememberFirst(rel string, fi fs.FileInfo) {
	id, ok := multiName(fi)
	if !ok || ls.firsts == nil || len(ls.firsts) >= maxFirstNames {
		return
	}
	if _, seen := ls.firsts[id]; !seen {
		ls.firsts[id] = rel
	}
}

// sendHardLink sends rel (fi its stat, taken on the open file) as a
// further name of a file this pass already sent under another name, when
// that name still holds it. done is false otherwise (rel is then sent as
// a file).
func (ls *liveSender) sendHardLink(rel string, fi fs.FileInfo) (done bool, err error) {
	id, ok := multiName(fi)
	if !ok || ls.firsts == nil || ls.links.Load() >= maxHardLinks {
		return false, nil
	}
	first, ok := ls.firsts[id]
	if !ok || first == rel {
		return false, nil
	}
	fe := ls.index[first]
	if fe == nil || fe.kind != 'f' || fe.ino != id.ino {
		return false, nil
	}
	ls.rw.begin(recHardLink)
	ls.rw.str(rel)
	ls.rw.str(first)
	if err := ls.rw.flush(); err != nil {
		return true, err
	}
	e := *fe
	ls.index[rel] = &e
	ls.links.Add(1)
	return true, nil
}

// sendSparse sends the open file f (fi its stat, e its entry being made)
// as its data extents; done is false when the file system cannot tell
// where the data lies (f is then sent whole).
func (ls *liveSender) sendSparse(rel string, f *sandbox.File, e *liveEntry) (done bool, err error) {
	of := f.OSFile()
	if of == nil {
		return false, nil
	}
	rc, err := of.SyscallConn()
	if err != nil {
		return false, nil
	}
	var exts []archive.Extent
	ok := false
	if cerr := rc.Control(func(fd uintptr) { exts, ok = archive.DataExtents(int(fd), e.size, maxExtents) }); cerr != nil || !ok {
		return false, nil
	}
	ls.rw.begin(recSparse)
	ls.rw.str(rel)
	ls.rw.uvarint(uint64(e.mode))
	ls.rw.varint(e.mtime)
	ls.rw.uvarint(uint64(e.size))
	ls.rw.uvarint(uint64(len(exts)))
	if err := ls.rw.flush(); err != nil {
		return true, err
	}
	ls.h.Reset()
	for _, x := range exts {
		ls.rw.scratch = ls.rw.scratch[:0]
		ls.rw.uvarint(uint64(x.Off))
		ls.rw.uvarint(uint64(x.N))
		if err := ls.rw.flush(); err != nil {
			return true, err
		}
		hashExtentHead(ls.h, x.Off, x.N)
		if err := ls.copyFile(io.NewSectionReader(f, x.Off, x.N), x.N); err != nil {
			return true, err
		}
		ls.sent.Add(x.N)
	}
	ls.sparse.Add(1)
	return true, nil
}

// errSparseExtent: a sparse file record whose extents are not in order,
// overlap, are empty, or lie beyond the file's size.
var errSparseExtent = errors.New("a sparse file extent out of order, overlapping, empty or beyond the file's size")

// sparseFile writes a sparse file record (its head read): count extents,
// each written at its offset, then the size set (the holes allocate
// nothing, so only the data is charged against the disk limit).
func (a *applier) sparseFile(rel string, mode fs.FileMode, mtime int64, size, count uint64) error {
	if size > maxFileSize {
		return fmt.Errorf("%w: a sparse file of %d bytes (at most %d): %s", errBadStream, size, uint64(maxFileSize), shortPath(rel))
	}
	if count > maxExtents {
		return fmt.Errorf("%w: a sparse file of %d extents (at most %d): %s", errBadStream, count, maxExtents, shortPath(rel))
	}
	return a.writeFile(rel, mode, mtime, int64(size), func(f *sandbox.File) error {
		if err := a.extents(f, rel, size, count); err != nil {
			return err
		}
		return f.Truncate(int64(size))
	})
}

// extents reads count extents of a sparse file of size bytes and writes
// each at its offset of f: in increasing order, not overlapping, not
// empty, within the size.
func (a *applier) extents(f *sandbox.File, rel string, size, count uint64) error {
	var end uint64
	for i := uint64(0); i < count; i++ {
		d := &recDecoder{r: a.r}
		off, n := d.uvarint(), d.uvarint()
		if d.err != nil {
			return d.err
		}
		if n == 0 || off < end || off > size || n > size-off {
			return fmt.Errorf("%w: %w: [%d, +%d) after %d in a file of %d bytes: %s", errBadStream, errSparseExtent, off, n, end, size, shortPath(rel))
		}
		hashExtentHead(a.h, int64(off), int64(n))
		if err := a.copy(io.NewOffsetWriter(f, int64(off)), int64(n)); err != nil {
			return err
		}
		end = off + n
	}
	return nil
}

// errLinkUnknown: a hard link record to a path the stream did not write
// (or no longer holds as it wrote it).
var errLinkUnknown = errors.New("a hard link to a path this stream did not write")

// hardLink makes rel a further name of target, a file this stream wrote
// and still holds as written (its entry in sums); the sandbox makes the
// link inside the root, following no link on either side.
func (a *applier) hardLink(rel, target string) error {
	if a.links++; a.links > a.maxLinks {
		return fmt.Errorf("%w: more than %d hard link records", errBadStream, a.maxLinks)
	}
	if rel == target || isBelow(target, rel) {
		return fmt.Errorf("%w: %w: %s to %s", errBadStream, errLinkUnknown, shortPath(rel), shortPath(target))
	}
	d, base, err := a.parent(rel)
	if err != nil {
		return err
	}
	if _, err := a.clear(d, rel, base, 'l'); err != nil {
		return err
	}
	s, ok := a.sums[keyOf(target)]
	if !ok {
		return fmt.Errorf("%w: %w: %s to %s", errBadStream, errLinkUnknown, shortPath(rel), shortPath(target))
	}
	if err := a.dst.Link(target, rel); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, sandbox.ErrInvalid) {
			return fmt.Errorf("%w: %w: %s to %s: %v", errBadStream, errLinkUnknown, shortPath(rel), shortPath(target), err)
		}
		return err
	}
	a.sums[keyOf(rel)] = s
	return nil
}

// isBelow reports whether rel lies below the directory dir.
func isBelow(rel, dir string) bool {
	return len(rel) > len(dir) && rel[len(dir)] == '/' && rel[:len(dir)] == dir && path.Clean(dir) == dir
}
