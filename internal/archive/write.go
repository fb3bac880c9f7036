package archive

import (
	"archive/tar"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"io/fs"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/klauspost/pgzip"

	"github.com/wharf/wharf/internal/sandbox"
)

// gzipBlock is the pgzip block size; blocks in flight are two per core.
const gzipBlock = 1 << 20

// WriteOptions configure Write.
type WriteOptions struct {
	// Ignore holds newline-separated gitignore-syntax patterns; matching
	// files and directories (with everything below them) are left out.
	Ignore string
	// Level is the gzip level (see ParseLevel); LevelBestSpeed when zero
	// is not wanted must be set explicitly with LevelNone.
	Level int
	// Manifest appends the integrity entry ManifestName. A file of that
	// name at the root of the tree is then left out.
	Manifest bool
	// TreeTrailer selects the backup layout (see the package comment): the
	// tar stream holds only the regular files, and the directories, the
	// symbolic links and the integrity entry follow its end-of-archive
	// marker as a second tar stream in the same gzip stream. Readers that
	// stop at the marker (Go's archive/tar, hence Wings' restore, and GNU
	// tar) then see files only; Extract reads on and restores the tree.
	TreeTrailer bool
	// Progress, when set, is called after each entry with the totals so far.
	Progress func(Progress)
	// TempDir holds the spool of the integrity entry when it outgrows
	// memory; os.TempDir() when empty.
	TempDir string
	// Hash, when set, hashes the archive bytes; Result.Sum is its digest.
	// Left unset, no hash is computed (a transfer has no use for a backup's
	// SHA-1, and hashing costs a core-second per few GiB).
	Hash func() hash.Hash
	// Dir is the directory of src to archive; names in the archive are
	// relative to it. The root when empty.
	Dir string
	// Skip, when set, leaves out the entries for which it returns true (a
	// directory with everything below it). rel is relative to Dir.
	Skip func(rel string, d fs.DirEntry) bool
	// Compress, when set, replaces the parallel gzip: it wraps the
	// archive's writer (bzip2, xz, zstd for the file manager). Level is
	// then ignored.
	Compress func(w io.Writer) (io.WriteCloser, error)
	// Files, when set, lets the caller store regular files itself (the
	// backup repository, which skips unchanged files). Compress must then
	// pass the stream through unbuffered, so that the hooks are called at
	// their place in it.
	Files FileHook
}

// FileHook sees each regular file's entry (header, content, padding) of
// the tar stream as one piece, and may supply an unchanged file's entry
// without Write opening the file. A file with holes is a sparse entry
// (headers, map, data ranges, padding: sparse.go); a later name of a file
// already stored is a link entry in the tree trailer, not seen by the hook.
// A file the walk's lstat finds empty is not the hook's either: Write puts
// its header in the stream from that lstat, without opening it, and calls
// none of the hook's methods.
type FileHook interface {
	// Reuse is called with the file's lstat before it is opened. When it
	// returns ok, the hook has put the file's whole entry into the stream
	// itself; sum is the SHA-1 of its content (for the integrity entry;
	// ignored without WriteOptions.Manifest).
	Reuse(rel string, fi fs.FileInfo) (sum []byte, ok bool)
	// Begin is called before the first byte of a file's entry is written.
	Begin(rel string) error
	// End is called after its last byte (padding included). fi is the
	// fstat of the file read, nil when it changed while it was read (its
	// entry must then not be reused); sum is its content's SHA-1, nil
	// without WriteOptions.Manifest (the content is then not hashed).
	End(rel string, fi fs.FileInfo, sum []byte) error
}

// Progress is the running total of a Write.
type Progress struct {
	Entries int64 // files, directories and links written
	Input   int64 // file bytes read
	Output  int64 // archive bytes written
}

// Result describes a written archive.
type Result struct {
	Size     int64  // archive bytes
	Sum      string // lowercase hex digest of the archive bytes by WriteOptions.Hash
	Files    int64
	Dirs     int64
	Symlinks int64
	Links    int64 // hard-link entries (second and later names of a file)
	Input    int64 // file bytes read
}

// hashCounter passes writes through, counting and (when h is set) hashing
// them.
//
// It never returns an error to pgzip: a pgzip.Writer that saw a write error
// refuses to Close and leaves its output goroutine blocked for ever. The
// first error is kept instead (failed), everything after it is discarded,
// and the tar side stops at its next write (stopOnFail).
type hashCounter struct {
	w io.Writer
	h hash.Hash
	n atomic.Int64 // written by the gzip goroutines, read by Progress

	mu  sync.Mutex
	err error
}

func (c *hashCounter) Write(p []byte) (int, error) {
	if c.failed() != nil {
		return len(p), nil
	}
	n, err := c.w.Write(p)
	if c.h != nil {
		c.h.Write(p[:n])
	}
	c.n.Add(int64(n))
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		c.fail(err)
	}
	return len(p), nil
}

// fail records err (the first one wins): nothing more reaches w.
func (c *hashCounter) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

func (c *hashCounter) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// stopOnFail passes writes on to the compressor until the output failed.
type stopOnFail struct {
	w   io.Writer
	out *hashCounter
}

func (s stopOnFail) Write(p []byte) (int, error) {
	if err := s.out.failed(); err != nil {
		return 0, err
	}
	return s.w.Write(p)
}

// NewIgnore compiles newline-separated gitignore patterns; nil when there
// are none.
func NewIgnore(patterns string) gitignore.Matcher {
	return sandbox.CompilePatterns(strings.Split(patterns, "\n"))
}

// Write streams a tar.gz of the whole tree of src into w. It never follows
// a symbolic link. Sockets, devices and FIFOs are left out. A file that
// changes size while it is read is stored with the size it had when opened
// (cut, or padded with zeros). Pass src.Trusted() to archive files of the
// egg's denylist too. Nothing is written to w after an error, but what was
// written before stays: callers writing to a file remove it.
func Write(ctx context.Context, w io.Writer, src Source, opts WriteOptions) (Result, error) {
	wr, err := newWriter(w, src, opts)
	if err != nil {
		return Result{}, err
	}
	defer wr.closeSpools()
	walkErr := src.WalkContext(ctx, wr.dir, func(full string, d fs.DirEntry, err error) error {
		return wr.visit(ctx, full, d, err)
	})
	return wr.finish(walkErr)
}

// Source is the tree an archive is made of: a server's files read-only
// (sandbox.ReadOnly, what server.Server.Files gives) or a job's writable
// *sandbox.FS; Write and SizeBound only read it.
type Source interface {
	WalkContext(ctx context.Context, dir string, fn fs.WalkDirFunc) error
	ReadlinkEntry(rel string, d fs.DirEntry) (string, error)
	OpenEntry(rel string, d fs.DirEntry) (*sandbox.File, error)
	DeniedWalkEntry(rel string, d fs.DirEntry) bool
}

// writer is one Write: set up by newWriter, fed by visit for each entry of
// the walk, ended by finish.
type writer struct {
	src  Source
	opts WriteOptions
	dir  string // the archived directory of src, "." for the root

	out  *hashCounter   // the archive bytes, counted (and hashed)
	gz   io.WriteCloser // the compressor writing to out
	sink stopOnFail     // the compressor, until out failed
	tw   *tar.Writer    // the tar stream of the files
	meta *tar.Writer    // where directories, links and the integrity entry go

	trailer *spool // the tree trailer (TreeTrailer), nil otherwise
	man     *spool // the integrity entry's lines (Manifest), nil otherwise
	ign     gitignore.Matcher

	res      Result
	buf      []byte
	fileHash hash.Hash
	links    map[inode]string // first names of files with more than one name
}

// newWriter sets up the compressor, the tar streams and the spools.
func newWriter(w io.Writer, src Source, opts WriteOptions) (*writer, error) {
	wr := &writer{src: src, opts: opts, out: &hashCounter{w: w}}
	if opts.Hash != nil {
		wr.out.h = opts.Hash()
	}
	if opts.Compress != nil {
		c, err := opts.Compress(wr.out)
		if err != nil {
			return nil, err
		}
		wr.gz = c
	} else {
		pg, err := pgzip.NewWriterLevel(wr.out, opts.Level)
		if err != nil {
			return nil, err
		}
		if err := pg.SetConcurrency(gzipBlock, 2*runtime.GOMAXPROCS(0)); err != nil {
			return nil, err
		}
		wr.gz = pg
	}
	wr.dir = strings.Trim(opts.Dir, "/")
	if wr.dir == "" {
		wr.dir = "."
	}
	wr.sink = stopOnFail{wr.gz, wr.out}
	wr.tw = tar.NewWriter(wr.sink)
	wr.meta = wr.tw
	if opts.TreeTrailer {
		wr.trailer = &spool{dir: opts.TempDir}
		wr.meta = tar.NewWriter(wr.trailer)
	}
	wr.ign = NewIgnore(opts.Ignore)
	if opts.Manifest {
		wr.man = &spool{dir: opts.TempDir}
	}
	wr.buf = make([]byte, 256<<10)
	wr.fileHash = sha1.New()
	wr.links = map[inode]string{}
	return wr, nil
}

// closeSpools removes the spools' temporary files.
func (wr *writer) closeSpools() {
	if wr.trailer != nil {
		wr.trailer.Close()
	}
	if wr.man != nil {
		wr.man.Close()
	}
}

// visit is the walk function: it leaves out what must not be archived and
// writes the rest.
func (wr *writer) visit(ctx context.Context, full string, d fs.DirEntry, err error) error {
	rel := full
	if wr.dir != "." {
		rel = strings.TrimPrefix(strings.TrimPrefix(full, wr.dir), "/")
		if rel == "" {
			rel = "."
		}
	}
	if err != nil {
		if rel == "." || !sandbox.Vanished(err) {
			return err // a part of the tree could not be read
		}
		return nil // removed or swapped during the walk: no longer there
	}
	if rel == "." {
		if !d.IsDir() {
			return &fs.PathError{Op: "archive", Path: "/" + wr.dir, Err: sandbox.ErrNotDir}
		}
		return nil
	}
	if wr.opts.Skip != nil && wr.opts.Skip(rel, d) {
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	}
	if wr.opts.Manifest && rel == ManifestName {
		return nil
	}
	if wr.ign != nil && wr.ign.Match(strings.Split(rel, "/"), d.IsDir()) {
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	}
	if d.Type().IsRegular() {
		// Mode and times come from the opened file (fstat): no lstat of the name.
		if wr.opts.Files != nil {
			if err := wr.writeFileHooked(ctx, full, rel, d); err != nil {
				return err
			}
			report(wr.opts.Progress, &wr.res, wr.out)
			return nil
		}
		if err := wr.writeFile(ctx, full, rel, d); err != nil {
			return err
		}
		report(wr.opts.Progress, &wr.res, wr.out)
		return nil
	}
	return wr.writeMeta(full, rel, d)
}

// writeMeta writes a directory or a symbolic link; other kinds (socket,
// device, FIFO) are left out.
func (wr *writer) writeMeta(full, rel string, d fs.DirEntry) error {
	fi, err := d.Info()
	if err != nil {
		return err
	}
	hdr := header(rel, fi)
	switch {
	case d.IsDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		wr.res.Dirs++
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := wr.src.ReadlinkEntry(full, d)
		if err != nil {
			return vanishedIsNil(err)
		}
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = target
		wr.res.Symlinks++
	default:
		return nil // socket, device, FIFO
	}
	if err := wr.meta.WriteHeader(hdr); err != nil {
		return err
	}
	report(wr.opts.Progress, &wr.res, wr.out)
	return nil
}

// finish ends the archive after the walk: the integrity entry, the tar
// end, the trailer, the compressor. walkErr is the walk's error.
func (wr *writer) finish(walkErr error) (Result, error) {
	if walkErr == nil && wr.opts.Manifest {
		walkErr = writeManifest(wr.meta, wr.man)
	}
	if walkErr == nil {
		walkErr = wr.tw.Close()
	}
	if walkErr == nil && wr.trailer != nil {
		walkErr = appendTrailer(wr.sink, wr.meta, wr.trailer)
	}
	if walkErr != nil {
		wr.out.fail(walkErr) // the compressor's last blocks go nowhere
	}
	// Close always, even after an error: it ends the compressor's goroutines.
	if cerr := wr.gz.Close(); walkErr == nil {
		walkErr = cerr
	}
	if walkErr == nil {
		walkErr = wr.out.failed()
	}
	if walkErr != nil {
		return Result{}, walkErr
	}
	wr.res.Size = wr.out.n.Load()
	if wr.out.h != nil {
		wr.res.Sum = hex.EncodeToString(wr.out.h.Sum(nil))
	}
	report(wr.opts.Progress, &wr.res, wr.out)
	return wr.res, nil
}

// appendTrailer ends the spooled second tar stream and copies it after the
// first one's end-of-archive marker.
func appendTrailer(gz io.Writer, meta *tar.Writer, trailer *spool) error {
	if err := meta.Close(); err != nil {
		return err
	}
	r, err := trailer.Reader()
	if err != nil {
		return err
	}
	_, err = io.Copy(gz, r)
	return err
}

func report(fn func(Progress), res *Result, out *hashCounter) {
	if fn != nil {
		fn(Progress{Entries: res.Files + res.Dirs + res.Symlinks + res.Links, Input: res.Input, Output: out.n.Load()})
	}
}

func header(rel string, fi fs.FileInfo) *tar.Header {
	return &tar.Header{
		Name:    rel,
		Mode:    int64(fi.Mode().Perm()),
		ModTime: fi.ModTime().Truncate(time.Second),
		Format:  tar.FormatUnknown,
	}
}

// writeFile stores the regular file d; one that vanished, is no longer a
// regular file, or is denied (a directory on its way renamed since the
// listing) is left out. One that cannot be opened or read otherwise is an
// error naming it: the archive would silently miss it. ctx is checked
// before every chunk, so that a huge file stops being read as soon as the
// caller is gone. A second name of a file already stored is a hard-link
// entry (links.go); a file with holes is a sparse entry (sparse.go).
func (wr *writer) writeFile(ctx context.Context, full, rel string, d fs.DirEntry) error {
	f, err := wr.src.OpenEntry(full, d)
	if err != nil {
		if errors.Is(err, sandbox.ErrDenied) {
			return nil
		}
		return vanishedIsNil(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil // swapped for a FIFO, a device…
	}
	if done, err := wr.writeLink(rel, fi); done || err != nil {
		return err
	}
	hdr := header(rel, fi)
	hdr.Typeflag = tar.TypeReg
	hdr.Size = fi.Size()
	if frags, ok := sparseFrags(f, fi); ok {
		return wr.writeSparse(ctx, f, hdr, frags, fi)
	}
	tw, h, man, buf := wr.tw, wr.fileHash, wr.man, wr.buf
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	var dst io.Writer = tw
	if man != nil {
		h.Reset()
		dst = io.MultiWriter(tw, h)
	}
	n, err := io.CopyBuffer(dst, io.LimitReader(sandbox.ContextReader(ctx, onlyReader{f}), hdr.Size), buf)
	var rerr readErr
	if errors.As(err, &rerr) {
		return rerr.error // the file's own error, which names it
	}
	if err != nil {
		return err
	}
	if n < hdr.Size { // the file shrank: pad to the declared size
		if _, err := io.CopyBuffer(dst, io.LimitReader(sandbox.ContextReader(ctx, zeros{}), hdr.Size-n), buf); err != nil {
			return err
		}
	}
	return wr.fileDone(rel, fi, hdr.Size)
}

// fileDone counts a stored file, remembers it as the first name of its
// inode and writes its line of the integrity entry (the hash in
// wr.fileHash).
func (wr *writer) fileDone(rel string, fi fs.FileInfo, input int64) error {
	wr.res.Files++
	wr.res.Input += input
	wr.rememberLink(rel, fi)
	if wr.man != nil {
		if _, err := io.WriteString(wr.man, manifestLine(wr.fileHash.Sum(nil), rel)); err != nil {
			return err
		}
	}
	return nil
}

// vanishedIsNil leaves out an entry that went away during the walk (see
// sandbox.Vanished) and keeps any other error.
func vanishedIsNil(err error) error {
	if sandbox.Vanished(err) {
		return nil
	}
	return err
}

// readErr marks an error of the source file, as opposed to the archive.
type readErr struct{ error }

// onlyReader hides other methods of the file (io.CopyBuffer must use the
// buffer) and marks its errors.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	if err != nil && err != io.EOF {
		err = readErr{err}
	}
	return n, err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func writeManifest(tw *tar.Writer, man *spool) error {
	return writeManifestAt(tw, man, time.Now())
}

// writeManifestAt writes the integrity entry, its time mt.
func writeManifestAt(tw *tar.Writer, man *spool, mt time.Time) error {
	r, err := man.Reader()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: ManifestName, Mode: 0o644, Size: man.Len(),
		ModTime: mt.Truncate(time.Second),
	}); err != nil {
		return err
	}
	_, err = io.Copy(tw, r)
	return err
}

// writeFileHooked stores the regular file d with WriteOptions.Files: an
// unchanged file is the hook's (not opened); another one is written as one
// whole entry (header, content, padding) between Begin and End, bypassing
// the tar writer, which then carries on after it.
func (wr *writer) writeFileHooked(ctx context.Context, full, rel string, d fs.DirEntry) error {
	hook := wr.opts.Files
	fi, err := d.Info()
	if err != nil {
		return vanishedIsNil(err)
	}
	// Pending padding of a previous entry in tw (the layout without the
	// tree trailer mixes directories in) goes out first.
	if err := wr.tw.Flush(); err != nil {
		return err
	}
	// A later name of a file stored already is a link entry (issue 33
	// item 6): its content is not chunked again under another header.
	if done, err := wr.writeLink(rel, fi); done || err != nil {
		return err
	}
	if fi.Size() == 0 {
		return wr.writeEmptyHooked(full, rel, d, fi)
	}
	if sum, ok := hook.Reuse(rel, fi); ok {
		wr.rememberLink(rel, fi)
		wr.res.Files++
		if wr.man != nil {
			if _, err := io.WriteString(wr.man, manifestLine(sum, rel)); err != nil {
				return err
			}
		}
		return nil
	}
	f, err := wr.src.OpenEntry(full, d)
	if err != nil {
		if errors.Is(err, sandbox.ErrDenied) {
			return nil
		}
		return vanishedIsNil(err)
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	hdr := header(rel, fi)
	hdr.Typeflag = tar.TypeReg
	hdr.Size = fi.Size()
	frags, sparse := sparseFrags(f, fi)
	if err := hook.Begin(rel); err != nil {
		return err
	}
	input := hdr.Size
	if sparse {
		// Holes stay holes in the repository too (issue 33 item 5).
		if input, err = wr.sparseEntry(ctx, f, hdr, frags); err != nil {
			return err
		}
	} else if err := wr.denseEntry(ctx, f, hdr); err != nil {
		return err
	}
	var sum []byte
	if wr.man != nil {
		sum = wr.fileHash.Sum(nil)
	}
	wr.rememberLink(rel, fi)
	// A file written to while it was read may hold a mix: never reuse it.
	after, err := f.Stat()
	if err != nil || after.Size() != fi.Size() || !after.ModTime().Equal(fi.ModTime()) || ctimeOf(after) != ctimeOf(fi) {
		fi = nil
	}
	if err := hook.End(rel, fi, sum); err != nil {
		return err
	}
	wr.res.Files++
	wr.res.Input += input
	if wr.man != nil {
		if _, err := io.WriteString(wr.man, manifestLine(sum, rel)); err != nil {
			return err
		}
	}
	return nil
}

// denseEntry writes the whole entry of f (header, content, padding) to the
// archive's stream, bypassing the tar writer, hashing the content into
// wr.fileHash with an integrity entry.
func (wr *writer) denseEntry(ctx context.Context, f *sandbox.File, hdr *tar.Header) error {
	// A tar writer of its own encodes the header (PAX records included);
	// it is never closed, so it writes no end marker.
	if err := tar.NewWriter(wr.sink).WriteHeader(hdr); err != nil {
		return err
	}
	// The files' SHA-1 is for the integrity entry: without one, no hash.
	var dst io.Writer = wr.sink
	if wr.man != nil {
		wr.fileHash.Reset()
		dst = io.MultiWriter(wr.sink, wr.fileHash)
	}
	n, err := io.CopyBuffer(dst, io.LimitReader(sandbox.ContextReader(ctx, onlyReader{f}), hdr.Size), wr.buf)
	var rerr readErr
	if errors.As(err, &rerr) {
		return rerr.error
	}
	if err != nil {
		return err
	}
	if n < hdr.Size {
		if _, err := io.CopyBuffer(dst, io.LimitReader(sandbox.ContextReader(ctx, zeros{}), hdr.Size-n), wr.buf); err != nil {
			return err
		}
	}
	if pad := -hdr.Size & 511; pad > 0 {
		_, err = wr.sink.Write(make([]byte, pad))
	}
	return err
}

// writeEmptyHooked stores a regular file that the walk's lstat found
// empty: its header, from that lstat, without opening it, and without the
// hook, which gains nothing from such a file (issue 33: a game can make
// hundreds of thousands at no disk cost, and a repository backup made a
// chunk and an index entry of each). As for a file the hook reuses, the
// entry is the file as listed.
func (wr *writer) writeEmptyHooked(full, rel string, d fs.DirEntry, fi fs.FileInfo) error {
	if wr.src.DeniedWalkEntry(strings.TrimPrefix(full, "/"), d) {
		return nil
	}
	hdr := header(rel, fi)
	hdr.Typeflag = tar.TypeReg
	if err := tar.NewWriter(wr.sink).WriteHeader(hdr); err != nil {
		return err
	}
	wr.res.Files++
	if wr.man != nil {
		sum := sha1.Sum(nil)
		if _, err := io.WriteString(wr.man, manifestLine(sum[:], rel)); err != nil {
			return err
		}
	}
	return nil
}

// ctimeOf is the inode change time in nanoseconds, 0 when unknown.
func ctimeOf(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ctim.Nano()
	}
	return 0
}
