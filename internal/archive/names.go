package archive

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"syscall"

	"github.com/klauspost/pgzip"

	"github.com/wharf/wharf/internal/sandbox"
)

// Names is what an archive makes: each name it writes and whether that
// ends as a directory, a regular file or something else (a link). A
// truncating restore that knows it can keep what the archive writes
// again (see Prune) instead of emptying the directory first.
type Names struct {
	kinds map[string]nameKind
	bytes int
}

type nameKind uint8

const (
	kindDir nameKind = iota + 1
	kindFile
	kindOther
)

// Bounds of a Names: a backup of more entries is restored the plain way
// (the directory emptied first) rather than hold their names in memory.
const (
	maxNames     = 1 << 18
	maxNameBytes = 32 << 20
)

// ListNames reads the whole archive r (tar.gz, or tar with opts.Plain)
// like Check and returns the names it makes, as Extract would write them:
// the names of skipped entries (devices, FIFOs, unsafe names) and of the
// integrity entry are left out, every parent of a name is a directory,
// and a name written twice has the kind of its last entry. The names are
// nil, with no error, when there are more than a Names holds. A broken
// stream is ErrCorrupt, wrapping r's own error (a repository's damaged
// chunk can be told apart).
func ListNames(ctx context.Context, r io.Reader, opts ExtractOptions) (*Names, error) {
	n := &Names{kinds: map[string]nameKind{}}
	err := scan(ctx, r, opts.Plain, func(hdr *tar.Header) {
		if n != nil && !n.add(hdr, opts.NoManifest) {
			n = nil
		}
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// scan reads the whole archive r (tar.gz, or tar when plain), calling fn
// with each entry's header, to the end of the stream: a truncated or
// corrupt end is ErrCorrupt, wrapping the reader's error.
func scan(ctx context.Context, r io.Reader, plain bool, fn func(*tar.Header)) error {
	in := r
	if !plain {
		gz, err := pgzip.NewReaderN(r, gzipBlock, 4)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		defer gz.Close()
		in = gz
	}
	rd := newStreamReader(in)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := rd.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		fn(hdr)
	}
	if _, err := io.Copy(io.Discard, in); err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return nil
}

// add records the entry hdr; false when the names outgrow the bounds.
func (n *Names) add(hdr *tar.Header, noManifest bool) bool {
	rel, ok := safeName(hdr.Name)
	if !ok || rel == "." {
		return true
	}
	var k nameKind
	switch hdr.Typeflag {
	case tar.TypeDir:
		k = kindDir
	case tar.TypeReg:
		if rel == ManifestName && !noManifest {
			return true
		}
		k = kindFile
	case tar.TypeSymlink, tar.TypeLink:
		k = kindOther
	default:
		return true
	}
	n.set(rel, k)
	for i := strings.LastIndexByte(rel, '/'); i > 0; i = strings.LastIndexByte(rel[:i], '/') {
		n.set(rel[:i], kindDir)
	}
	return len(n.kinds) <= maxNames && n.bytes <= maxNameBytes
}

func (n *Names) set(rel string, k nameKind) {
	if _, ok := n.kinds[rel]; !ok {
		n.bytes += len(rel)
	}
	n.kinds[rel] = k
}

// Prune removes from dst every entry that extracting the archive named by
// names would not write again as the same kind of entry: names the
// archive lacks, directories where it has a file and the other way round,
// links, FIFOs and devices, and regular files with more than one name
// (rewriting one in place would change the others). What is left is
// directories and single-named regular files the archive writes over:
// Extract then truncates and rewrites those files in place, which on a
// tree of tens of thousands of files is several times faster than making
// them anew in an emptied directory (the file system allocates no
// inodes), and the end is the same: the directory holds exactly the
// archive. dst should be the Trusted view of the server's sandbox.
func Prune(ctx context.Context, dst *sandbox.FS, names *Names) error {
	return dst.WalkContext(ctx, ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			if sandbox.Vanished(err) {
				return nil
			}
			return err
		}
		if rel == "." || names.keeps(rel, d) {
			return nil
		}
		if err := dst.RemoveEntry(ctx, rel, d); err != nil && !sandbox.Vanished(err) {
			return err
		}
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
}

// keeps reports whether the existing entry d at rel is what the archive
// writes there again.
func (n *Names) keeps(rel string, d fs.DirEntry) bool {
	switch n.kinds[rel] {
	case kindDir:
		return d.IsDir()
	case kindFile:
		if !d.Type().IsRegular() {
			return false
		}
		fi, err := d.Info()
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		return ok && st.Nlink == 1
	default:
		return false
	}
}
