package archive

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"

	"github.com/wharf/wharf/internal/sandbox"
)

// Overheads used by SizeBound. Each is an upper bound of what Write can
// add, generous rather than tight: a bound that is too high only costs the
// backend a few more presigned URLs, one that is too low fails the backup.
const (
	// entryOverhead bounds the tar framing of one entry beyond its data
	// and its names: the 512-byte header, plus, for a long or non-ASCII
	// name or a size past 8 GiB, a PAX or GNU extension (another header and
	// its own records, counted here up to their fixed part; the names are
	// counted separately, twice).
	entryOverhead = 3 * 512
	// fixedOverhead bounds what does not depend on the entries: the two
	// end-of-archive markers (the tree trailer's and the file stream's),
	// the integrity entry's header, the gzip header and trailer.
	fixedOverhead = 64 << 10
	// manifestLineOverhead is a manifest line beyond its name: 40 hex
	// digits, two spaces, a newline.
	manifestLineOverhead = 43
)

// MaxBound is the largest bound SizeBound returns: 5 TiB, the largest
// object S3 stores. A sparse file counts at its allocated size (Write
// stores its holes as holes, issue 33 item 5; see storedBound).
const MaxBound int64 = 5 << 40

// ErrBoundTooLarge is a tree whose archive could be larger than MaxBound.
var ErrBoundTooLarge = errors.New("the server's files could make an archive larger than 5 TiB (sparse files count at their full size)")

// SizeBound walks what Write with the same options would archive and
// returns an upper bound of the archive's size with the default gzip
// compressor (opts.Compress unset), assuming the tree does not grow in
// between. It reads names and sizes only (lstat), not the files.
//
// The bound is the tar stream's size, counted from the entries (data
// rounded up to 512-byte blocks, a header and room for name extensions per
// entry, the integrity entry), plus the worst case of deflate on
// incompressible data: a stored block's 5-byte header per 65535 bytes and a
// sync flush per pgzip block, both far below the 1/256 allowed here.
func SizeBound(ctx context.Context, src Source, opts WriteOptions) (int64, error) {
	dir := strings.Trim(opts.Dir, "/")
	if dir == "" {
		dir = "."
	}
	ign := NewIgnore(opts.Ignore)
	var tarSize int64 = fixedOverhead
	seen := map[inode]struct{}{} // files with several names, counted once
	err := src.WalkContext(ctx, dir, func(full string, d fs.DirEntry, err error) error {
		rel := full
		if dir != "." {
			rel = strings.TrimPrefix(strings.TrimPrefix(full, dir), "/")
			if rel == "" {
				rel = "."
			}
		}
		if err != nil {
			if rel == "." || !sandbox.Vanished(err) {
				return err
			}
			return nil
		}
		if rel == "." {
			return nil
		}
		if opts.Skip != nil && opts.Skip(rel, d) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		isDir := d.IsDir()
		if ign != nil && ign.Match(strings.Split(rel, "/"), isDir) {
			if isDir {
				return fs.SkipDir
			}
			return nil
		}
		names := int64(len(rel)) + 1 // the directory's trailing slash
		switch {
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return vanishedIsNil(err)
			}
			stored := storedBound(fi)
			if id, ok := multiLinked(fi); ok && len(seen) < maxLinkNames {
				if _, again := seen[id]; again {
					stored = 0 // a link entry (links.go): its header only
				}
				seen[id] = struct{}{}
			}
			if stored > MaxBound-tarSize {
				return fmt.Errorf("%w: %s alone is %d bytes", ErrBoundTooLarge, rel, stored)
			}
			tarSize += (stored + 511) &^ 511
			if opts.Manifest {
				tarSize += manifestLineOverhead + int64(len(rel))
			}
		case d.Type()&fs.ModeSymlink != 0:
			target, err := src.ReadlinkEntry(full, d)
			if err != nil {
				return vanishedIsNil(err)
			}
			names += int64(len(target))
		case isDir:
		default:
			return nil // socket, device, FIFO: left out
		}
		tarSize += entryOverhead + 2*((names+511)&^511)
		if tarSize > MaxBound {
			return ErrBoundTooLarge
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	// The integrity entry's data rounds up to a block too.
	tarSize += 512
	return tarSize + tarSize/256 + 5*(tarSize/gzipBlock+1), nil
}

// storedBound bounds the data Write stores for the regular file fi: its
// size, or for a file with fewer blocks allocated than its size (which
// Write stores as a sparse entry) its allocated bytes, plus the sparse map
// (a block and 42 bytes per fragment of at least a block, at most
// maxFrags+1 of them) and 64 KiB of slack for data a filesystem keeps
// outside its blocks (inline data). A file with more than maxFrags
// fragments has its smallest holes stored as zeros, beyond this bound.
func storedBound(fi fs.FileInfo) int64 {
	size := fi.Size()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Blocks*512 >= size {
		return size
	}
	alloc := st.Blocks * 512
	frags := min(alloc/4096+2, maxFrags+1)
	return min(size, alloc+64<<10) + 512 + 42*frags
}
