package archive

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/klauspost/pgzip"
	"github.com/klauspost/readahead"
	"golang.org/x/time/rate"

	"github.com/wharf/wharf/internal/sandbox"
)

// ExtractOptions configure Extract.
type ExtractOptions struct {
	// WriteLimit bounds the file bytes written per second; 0 is unlimited.
	WriteLimit int64
	// OnEntry, when set, is called with the name of each entry (as stored,
	// without a trailing slash) before it is written.
	OnEntry func(name string)
	// Ready, when set, is called once the archive is known to be readable
	// (its gzip header and first tar header, or its end, were read) and
	// before anything is written; an error from it stops Extract.
	Ready func() error
	// TempDir holds the spool of file checksums when it outgrows memory;
	// os.TempDir() when empty.
	TempDir string
	// NoManifest says the archive carries no integrity entry because its
	// stream is checked as a whole (a transfer's SHA-256): files are not
	// hashed, and a root file named ManifestName is an ordinary file.
	NoManifest bool
	// Plain says r is the tar stream itself, not gzipped (a backup
	// repository's stream, whose chunks are checked on reading).
	Plain bool
}

// ExtractResult describes an extraction.
type ExtractResult struct {
	Files    int64
	Dirs     int64
	Symlinks int64
	Links    int64 // hard links made (counted in Files too)
	Bytes    int64 // file bytes written
	Skipped  int64 // device, FIFO and unknown entries left out
	Verified bool  // the integrity entry was found and every file matched
}

type extractor struct {
	ctx     context.Context
	dst     *sandbox.FS
	opts    ExtractOptions
	limiter *rate.Limiter
	buf     []byte
	h       hash.Hash
	sums    *spool
	tap     *tap
	made    map[inode]struct{} // regular files written by this archive (hard-link targets)
	links   map[string]bool    // symbolic links made by this archive
	stack   *sandbox.DirStack  // the open directories down to the current entry
	dirMeta []dirMeta          // modes and times applied at the end
	res     ExtractResult
	manOK   bool
}

type dirMeta struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

// Extract streams the tar.gz r into dst. Existing files are overwritten
// (a symbolic link or directory in the way is replaced, never written
// through; so is a link or file where a parent directory is needed);
// permissions are kept without setuid, setgid and sticky bits;
// modification times are restored (directories' last). Entries whose name
// is absolute, contains "..", or lies below a symbolic link of the archive,
// and hard links to such names or to anything but a regular file this
// extraction wrote, stop the extraction with ErrUnsafeEntry; other hard
// links are made as hard links (extract_links.go), sparse entries with
// their holes (extract_sparse.go); device, FIFO and unknown entries are
// skipped. A read error of the stream
// is ErrCorrupt. When the archive ends with the integrity entry every
// extracted file is checked against it (ErrChecksumMismatch), and the entry
// itself is not written. dst should be the Trusted view of the server's
// sandbox: confinement and the disk limit still apply.
//
// Each entry is made relative to its parent directory, held open from the
// previous entries (see sandbox.DirStack): the cost of an entry does not grow with
// its depth, and a directory swapped for a link while the extraction runs
// is never followed.
func Extract(ctx context.Context, r io.Reader, dst *sandbox.FS, opts ExtractOptions) (ExtractResult, error) {
	// The inflate is single-threaded and bounds an extraction, so reading
	// the input (system calls; for a transfer, HTTP chunks, multipart and
	// SHA-256) runs ahead of it in its own goroutine. The *bufio.Reader is
	// the type the inflater reads fastest.
	ra, err := readahead.NewReaderSize(r, 4, 1<<20)
	if err != nil {
		return ExtractResult{}, err
	}
	defer ra.Close()
	var in io.Reader = bufio.NewReaderSize(ra, 256<<10)
	if !opts.Plain {
		gz, err := pgzip.NewReaderN(in, gzipBlock, 4)
		if err != nil {
			return ExtractResult{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		defer gz.Close()
		in = gz
	}
	x := &extractor{
		ctx: ctx, dst: dst, opts: opts,
		buf:   make([]byte, 256<<10),
		h:     sha1.New(),
		sums:  &spool{dir: opts.TempDir},
		links: map[string]bool{},
		made:  map[inode]struct{}{},
	}
	defer x.sums.Close()
	if x.stack, err = newDirStack(x); err != nil {
		return ExtractResult{}, err
	}
	defer x.stack.Close()
	if opts.WriteLimit > 0 {
		burst := int(min(opts.WriteLimit, 1<<30))
		x.limiter = rate.NewLimiter(rate.Limit(opts.WriteLimit), burst)
		x.buf = x.buf[:min(len(x.buf), burst)]
	}
	x.tap = &tap{r: in}
	rd := newStreamReader(x.tap)
	first := true
	for {
		if err := ctx.Err(); err != nil {
			return x.res, err
		}
		x.tap.start()
		hdr, err := rd.next()
		x.tap.stop()
		if (err == io.EOF || hdr != nil) && first {
			first = false
			if opts.Ready != nil {
				if err := opts.Ready(); err != nil {
					return x.res, err
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return x.res, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		if x.manOK {
			// Entries after the integrity entry: it does not describe the archive.
			return x.res, fmt.Errorf("%w: entries follow %s", ErrChecksumMismatch, ManifestName)
		}
		if err := x.entry(rd.tr, hdr); err != nil {
			return x.res, err
		}
	}
	// Drain to the gzip trailer, so that a truncated or corrupt end is seen.
	if _, err := io.Copy(io.Discard, in); err != nil {
		return x.res, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	x.applyDirMeta()
	x.res.Verified = x.manOK
	return x.res, nil
}

// safeName cleans an entry name; ok is false for names leading out.
func safeName(name string) (string, bool) {
	if name == "" || strings.HasPrefix(name, "/") || strings.IndexByte(name, 0) >= 0 {
		return "", false
	}
	for _, part := range strings.Split(strings.TrimSuffix(name, "/"), "/") {
		if part == ".." {
			return "", false
		}
	}
	c := path.Clean(name)
	if c == "." {
		return ".", true
	}
	return c, true
}

// belowLink reports whether a parent of rel is a link made by this archive
// (for hard link targets: the parents of other entries are checked as the
// directory stack goes down to them).
func (x *extractor) belowLink(rel string) bool {
	if len(x.links) == 0 {
		return false
	}
	for i := strings.LastIndexByte(rel, '/'); i > 0; i = strings.LastIndexByte(rel[:i], '/') {
		if x.links[rel[:i]] {
			return true
		}
	}
	return false
}

func (x *extractor) unsafe(name string) error {
	return &entryError{name: name, err: ErrUnsafeEntry}
}

func (x *extractor) entry(tr *tar.Reader, hdr *tar.Header) error {
	rel, ok := safeName(hdr.Name)
	if !ok {
		return x.unsafe(hdr.Name)
	}
	if otherSparse(hdr) {
		// Go's reader would expand its holes as zeros, free to send.
		return fmt.Errorf("%w: %s: a sparse entry of a format other than GNU 1.0", ErrCorrupt, hdr.Name)
	}
	if rel == ManifestName && hdr.Typeflag == tar.TypeReg && !x.opts.NoManifest {
		if isSparse10(hdr) {
			return fmt.Errorf("%w: a sparse %s", ErrChecksumMismatch, ManifestName)
		}
		return x.verify(tr)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if rel == "." {
			return nil
		}
		x.onEntry(rel)
		return x.dir(rel, hdr)
	case tar.TypeReg:
		if rel == "." {
			return x.unsafe(hdr.Name)
		}
		x.onEntry(rel)
		if isSparse10(hdr) {
			return x.sparseFile(rel, hdr)
		}
		return x.file(rel, hdr, tr)
	case tar.TypeSymlink:
		if rel == "." {
			return x.unsafe(hdr.Name)
		}
		x.onEntry(rel)
		return x.symlink(rel, hdr)
	case tar.TypeLink:
		target, ok := safeName(hdr.Linkname)
		if !ok || target == "." || rel == "." || x.belowLink(target) || x.links[target] {
			return x.unsafe(hdr.Name)
		}
		x.onEntry(rel)
		return x.hardlink(rel, target, hdr)
	default:
		// Devices, FIFOs and anything unknown are never created.
		x.res.Skipped++
		if isSparse10(hdr) {
			return x.skipSparse(hdr)
		}
		return nil
	}
}

func (x *extractor) onEntry(rel string) {
	if x.opts.OnEntry != nil {
		x.opts.OnEntry(rel)
	}
}

func (x *extractor) wrap(rel string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sandbox.ErrOutsideRoot) {
		return &entryError{name: rel, err: fmt.Errorf("%w: %v", ErrUnsafeEntry, err)}
	}
	return err
}

// parent returns the open parent directory of rel (made when missing)
// and rel's last name.
func (x *extractor) parent(rel string) (*sandbox.Dir, string, error) {
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	d, err := x.stack.Enter(dir, true)
	return d, base, x.wrap(dir, err)
}

// clear removes what is at base in d unless it is a regular file
// (keepFile) or a directory (keepDir); existed says it was kept.
func (x *extractor) clear(d *sandbox.Dir, rel, base string, keepFile, keepDir bool) (existed bool, err error) {
	fi, err := d.Lstat(base)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, x.wrap(rel, err)
	}
	switch {
	case fi.IsDir() && keepDir, fi.Mode().IsRegular() && keepFile:
		return true, nil
	case fi.IsDir():
		err = d.RemoveAll(x.ctx, base)
	default:
		err = d.Remove(base)
	}
	return false, x.wrap(rel, err)
}

func (x *extractor) dir(rel string, hdr *tar.Header) error {
	d, base, err := x.parent(rel)
	if err != nil {
		return err
	}
	existed, err := x.clear(d, rel, base, false, true)
	if err != nil {
		return err
	}
	if !existed {
		if err := d.Mkdir(base, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return x.wrap(rel, err)
		}
	}
	delete(x.links, rel)
	x.dirMeta = append(x.dirMeta, dirMeta{name: rel, mode: fs.FileMode(hdr.Mode) & fs.ModePerm, mtime: hdr.ModTime})
	x.res.Dirs++
	return nil
}

// applyDirMeta sets the directories' modes and times, last made first (a
// directory's own entries are done by then), through the directory stack.
func (x *extractor) applyDirMeta() {
	for i := len(x.dirMeta) - 1; i >= 0; i-- {
		m := x.dirMeta[i]
		dir, base := path.Split(m.name)
		dir = strings.TrimSuffix(dir, "/")
		if dir == "" {
			dir = "."
		}
		d, err := x.stack.Enter(dir, false)
		if err != nil {
			continue // gone or replaced since: nothing to restore
		}
		_ = d.Chmod(base, m.mode)
		_ = d.Lchtimes(base, m.mtime, m.mtime)
	}
}

// create opens base in d for writing: created exclusively, or (something
// in the way) an existing regular file opened to be written over in place
// (old is its size, -1 for a new file), or after removing what was there.
func (x *extractor) create(d *sandbox.Dir, rel, base string, mode fs.FileMode) (f *sandbox.File, old int64, err error) {
	f, err = d.Create(base, mode)
	if !errors.Is(err, fs.ErrExist) {
		return f, -1, x.wrap(rel, err)
	}
	existed, err := x.clear(d, rel, base, true, false)
	if err != nil {
		return nil, -1, err
	}
	old = -1
	if existed {
		f, old, err = d.Overwrite(base)
	} else {
		f, err = d.Create(base, mode)
	}
	return f, old, x.wrap(rel, err)
}

func (x *extractor) file(rel string, hdr *tar.Header, r io.Reader) error {
	d, base, err := x.parent(rel)
	if err != nil {
		return err
	}
	delete(x.links, rel)
	mode := fs.FileMode(hdr.Mode) & fs.ModePerm
	f, old, err := x.create(d, rel, base, mode)
	if err != nil {
		return err
	}
	if !x.opts.NoManifest {
		x.h.Reset()
		r = io.TeeReader(r, x.h)
	}
	n, err := x.copy(f, r)
	if err == nil && n != hdr.Size {
		err = fmt.Errorf("%w: %s: short file", ErrCorrupt, rel)
	}
	if old > n {
		// Written over in place: what is left of the old file goes.
		if terr := f.Truncate(n); err == nil {
			err = x.wrap(rel, terr)
		}
	}
	return x.closeFile(f, d, rel, base, hdr, mode, old >= 0, n, err)
}

// closeFile ends the extraction of a regular file written through f
// (n bytes, err the first error so far): its times, its mode when it
// existed before, its line for the integrity check, the counts.
func (x *extractor) closeFile(f *sandbox.File, d *sandbox.Dir, rel, base string, hdr *tar.Header, mode fs.FileMode, existed bool, n int64, err error) error {
	if err == nil {
		err = x.wrap(rel, f.SetTimes(hdr.ModTime, hdr.ModTime))
	}
	if err == nil {
		x.remember(f)
	}
	if cerr := f.Close(); err == nil {
		err = x.wrap(rel, cerr)
	}
	if err != nil {
		return err
	}
	if existed || mode == 0 {
		if err := d.Chmod(base, mode); err != nil {
			return x.wrap(rel, err)
		}
	}
	if !x.opts.NoManifest {
		if _, err := io.WriteString(x.sums, manifestLine(x.h.Sum(nil), rel)); err != nil {
			return err
		}
	}
	x.res.Files++
	x.res.Bytes += n
	return nil
}

// copy writes r to w through the rate limiter. Read errors are ErrCorrupt.
func (x *extractor) copy(w io.Writer, r io.Reader) (int64, error) {
	var total int64
	for {
		n, rerr := r.Read(x.buf)
		if n > 0 {
			if x.limiter != nil {
				if err := x.limiter.WaitN(x.ctx, n); err != nil {
					return total, err
				}
			}
			if _, err := w.Write(x.buf[:n]); err != nil {
				return total, err
			}
			total += int64(n)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, fmt.Errorf("%w: %v", ErrCorrupt, rerr)
		}
	}
}

func (x *extractor) symlink(rel string, hdr *tar.Header) error {
	if hdr.Linkname == "" {
		return x.unsafe(hdr.Name)
	}
	d, base, err := x.parent(rel)
	if err != nil {
		return err
	}
	if _, err := x.clear(d, rel, base, false, false); err != nil {
		return err
	}
	if err := d.Symlink(hdr.Linkname, base); err != nil {
		return x.wrap(rel, err)
	}
	x.links[rel] = true
	_ = d.Lchtimes(base, hdr.ModTime, hdr.ModTime)
	x.res.Symlinks++
	return nil
}

// verify compares the integrity entry with the checksums of the files
// extracted so far, line by line (both are in archive order).
func (x *extractor) verify(r io.Reader) error {
	got, err := x.sums.Reader()
	if err != nil {
		return err
	}
	want := bufio.NewReader(r)
	have := bufio.NewReader(got)
	for {
		a, errA := want.ReadBytes('\n')
		b, errB := have.ReadBytes('\n')
		if errA != nil && errA != io.EOF {
			return fmt.Errorf("%w: %v", ErrCorrupt, errA)
		}
		if !bytes.Equal(a, b) {
			name := strings.TrimSpace(string(a))
			if i := strings.Index(name, "  "); i >= 0 {
				name = name[i+2:]
			}
			return fmt.Errorf("%w: %s", ErrChecksumMismatch, name)
		}
		if errA == io.EOF || errB == io.EOF {
			if errA != errB {
				return ErrChecksumMismatch
			}
			break
		}
	}
	x.manOK = true
	return nil
}

// Check reads the whole tar.gz r and reports ErrCorrupt when its gzip or
// tar structure is broken or the stream is cut short. It writes nothing.
func Check(ctx context.Context, r io.Reader) error {
	return scan(ctx, r, false, func(*tar.Header) {})
}

// streamReader reads the entries of an archive: those of its tar stream,
// then those of the tree trailer that may follow the end-of-archive marker
// (see the package comment).
type streamReader struct {
	r       io.Reader // the decompressed stream
	tr      *tar.Reader
	trailer bool // reading the second stream
	started bool // an entry of the second stream was read
}

func newStreamReader(r io.Reader) *streamReader {
	return &streamReader{r: r, tr: tar.NewReader(r)}
}

// next returns the next entry of either stream, io.EOF after the last.
func (s *streamReader) next() (*tar.Header, error) {
	hdr, err := s.tr.Next()
	if err == io.EOF && !s.trailer {
		// The tar reader stops exactly after the two zero blocks of the
		// marker: what follows is the trailer, zero padding (GNU tar pads
		// to its record size) or nothing.
		s.trailer = true
		s.tr = tar.NewReader(s.r)
		hdr, err = s.tr.Next()
	}
	if s.trailer && !s.started {
		if err == io.ErrUnexpectedEOF {
			// Less than a block after the marker: padding, not a trailer.
			// A stream cut short is still caught by the final drain of
			// the gzip reader.
			err = io.EOF
		}
		s.started = err == nil
	}
	return hdr, err
}
