package files

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"time"

	"github.com/mholt/archives"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/usererr"
)

// Holes stay holes (issue 33 "decompress writes holes", issue 38 §1b). Go's
// tar reader presents a sparse entry as a regular file whose holes read as
// zeros, and hides its map: an 8 TiB file with 1 MiB of data would be 8 TiB
// of zeros read and written. The tar formats are therefore read through a
// tap that keeps what the reader consumes for each entry's headers, from
// which archive.SparseMap recovers the map; the entry's fragments are then
// copied from the stream to their offsets, the holes are left unwritten
// (the disk limit is charged what the fragments allocate), the file is cut
// to its size, and the reader is owed the data bytes it did not read, which
// it skips as zeros from the tap without their ever being expanded. The old
// GNU sparse type ('S'), whose map Go's reader keeps in its header blocks,
// is extracted as before, its holes written as zeros (bounded by the disk
// limit as any write); reading its map from the header blocks is not done.

// maxSparseSize bounds the size a sparse entry may declare: ext4's largest
// file (16 TiB with 4 KiB blocks); a map that claims more is refused before
// anything is written.
const maxSparseSize = 16 << 40

// extract runs an extractor, decompressing first when c is not nil; tar is
// read through a tap (sparse entries).
func (x *extraction) extract(ctx context.Context, ex archives.Extractor, c archives.Compression, stream io.Reader) error {
	if c != nil {
		rc, err := c.OpenReader(stream)
		if err != nil {
			return err
		}
		defer rc.Close()
		stream = rc
	}
	var t archives.Tar
	switch e := ex.(type) {
	case archives.Tar:
		t = e
	case *archives.Tar:
		t = *e
	default:
		return ex.Extract(ctx, stream, x.entry)
	}
	x.tap = archive.NewTap(stream)
	return t.Extract(ctx, x.tap, x.entry)
}

// sparseEntry handles a regular tar entry that may be sparse: done is true
// when it was (extracted or skipped).
func (x *extraction) sparseEntry(name string, perm fs.FileMode, mtime time.Time, h *tar.Header) (bool, error) {
	frags, _, ok, err := archive.SparseMap(h, x.tap.Recorded())
	if !ok && h.Typeflag != tar.TypeGNUSparse {
		return false, nil
	}
	if err != nil {
		return true, usererr.Wrap(fmt.Errorf("%s: %w", h.Name, err), usererr.Invalid, ErrCorruptArchive.Message)
	}
	if h.Size > maxSparseSize {
		return true, usererr.New(usererr.Invalid, fmt.Sprintf(
			"Cannot extract the archive: %s declares a size of %d bytes, more than a file may have.", display(name), h.Size))
	}
	if !ok { // the old GNU type: written whole, holes as zeros
		return false, nil
	}
	return true, x.sparseFile(name, perm, mtime, h.Size, frags)
}

// sparseFile writes a sparse entry's fragments at their offsets and cuts
// the file to size.
func (x *extraction) sparseFile(name string, perm fs.FileMode, mtime time.Time, size int64, frags []archive.SparseFragment) error {
	dir := path.Dir("/" + name)
	if err := x.mkdirs(&x.seq, dir); err != nil {
		return x.skipDenied(err)
	}
	if perm == 0 {
		perm = 0o644
	}
	if err := x.announce(journalEntry, name); err != nil {
		return err
	}
	x.budget.ensure(entryMargin)
	w, err := x.create(&x.seq, dir, name, perm)
	if err != nil {
		return x.skipDenied(err)
	}
	var written int64
	for _, fr := range frags {
		if err != nil || fr.Length == 0 {
			continue
		}
		var n int64
		n, err = io.Copy(budgetWriter{io.NewOffsetWriter(w, fr.Offset), x.budget}, io.LimitReader(x.tap.Direct(), fr.Length))
		written += n
		if err == nil && n != fr.Length {
			err = usererr.New(usererr.Invalid, ErrCorruptArchive.Message)
		}
	}
	x.tap.Owe(written) // the reader skips these as zeros
	if err == nil {
		err = w.Truncate(size)
	}
	if err == nil && !mtime.IsZero() {
		err = w.SetTimes(mtime, mtime)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	x.wroteFile(name, written)
	return err
}
