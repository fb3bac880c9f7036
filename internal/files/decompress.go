package files

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/klauspost/compress/zip"
	"github.com/mholt/archives"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/usererr"
)

// DecompressResult counts what an extraction did.
type DecompressResult struct {
	Files, Dirs, Links int
	Skipped            int // unsafe names, denylisted names, devices, FIFOs, hard links leading out
	Bytes              int64
}

// Decompress extracts the archive file (relative to root) into root. The
// format is found from the content: zip, tar, tar.gz/bz2/xz/zst/lz4, 7z,
// rar, or a single compressed file (x.gz is written as x). Every write goes
// through the sandbox. Entries with absolute names, "..", names below a
// link made by the archive, hard links to anything not extracted before,
// devices, FIFOs and denylisted names are skipped. Permission bits (never
// setuid, setgid, sticky) and modification times are kept. The disk limit
// is checked before when the format declares its sizes up front (zip) and
// enforced on every write; when it is crossed, or on any other error,
// everything this extraction wrote is removed.
//
// With m.Isolation set, the archive is decoded in a child process
// (decompress_isolated.go); without it, in this one.
func (m *Manager) Decompress(ctx context.Context, root, file string) (DecompressResult, error) {
	if m.Isolation != nil {
		return m.decompressIsolated(ctx, root, file)
	}
	return m.decompressHere(ctx, root, file, nil, nil)
}

// decompressHere is Decompress in this process. Each entry is announced to
// journal (when not nil) before it is created: see journal. b (when not
// nil) makes room in the sandbox's limit before each write: see budget.
func (m *Manager) decompressHere(ctx context.Context, root, file string, journal io.Writer, b *budget) (DecompressResult, error) {
	name := join(root, file)
	src, err := m.FS.Open(name)
	if err != nil {
		return DecompressResult{}, err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return DecompressResult{}, err
	}
	if fi.IsDir() {
		return DecompressResult{}, ErrIsDirectory
	}
	if !fi.Mode().IsRegular() {
		return DecompressResult{}, ErrFileType
	}
	if dfi, err := m.FS.Stat(root); err != nil {
		return DecompressResult{}, err
	} else if !dfi.IsDir() {
		return DecompressResult{}, ErrNotDirectory
	}
	format, stream, err := archives.Identify(ctx, "", src)
	if errors.Is(err, archives.NoMatch) || format == nil {
		return DecompressResult{}, ErrUnknownFormat
	}
	if err != nil {
		return DecompressResult{}, usererr.Wrap(err, usererr.Invalid, ErrCorruptArchive.Message)
	}
	x := &extraction{m: m, root: root, journal: journal, budget: b, links: map[string]bool{}, known: map[string]bool{}, made: map[string]bool{}}
	defer x.seq.close()
	if _, ok := format.(archives.Zip); !ok {
		// The sequential formats create their directories and files
		// through a stack of the directories on the way (see dirCache).
		if st, err := m.FS.NewDirStack(); err == nil {
			x.seq.stack = st
		}
	}
	switch format.(type) {
	case archives.CompressedArchive, archives.Decompressor:
		// The decompressors read through a 4 KiB bufio.Reader of their
		// own unless given an io.ByteReader: this one reads the archive
		// in large pieces (a read per 256 KiB, not per 8 KiB). Not for
		// 7z and rar, which need the file itself (io.ReaderAt, io.Seeker).
		stream = bufio.NewReaderSize(stream, readBuffer)
	}
	switch f := format.(type) {
	case archives.Zip:
		err = x.zip(ctx, src, fi.Size())
	case archives.CompressedArchive:
		if gz, ok := f.Compression.(archives.Gz); ok {
			// One goroutine inflates and writes (klauspost's gzip, as
			// Wings'): pgzip's read-ahead goroutine handed every block
			// across threads, and each long create or mkdir of the
			// extraction made the runtime hand its processor over (futex
			// wake-ups, sysmon polling every 20 µs), which cost more CPU
			// than the overlap gained on a busy node (docs/benchmarks.md,
			// "Decompress at Wings' pace").
			gz.Multithreaded = false
			f.Compression = gz
		}
		if f.Extraction == nil {
			err = f.Extract(ctx, stream, x.entry)
		} else {
			err = x.extract(ctx, f.Extraction, f.Compression, stream)
		}
	case archives.Extractor:
		err = x.extract(ctx, f, nil, stream)
	case archives.Decompressor:
		err = x.single(ctx, f, stream, path.Base("/"+file))
	default:
		return x.res, ErrUnknownFormat
	}
	if err != nil {
		x.rollback()
		return x.res, x.userError(err)
	}
	x.finishDirs()
	return x.res, nil
}

// zip extracts a zip archive: the central directory is read first (sizes
// checked against the disk limit, names checked, links found), then
// directories and regular files are written by one worker per core (zip
// entries are independent), links last.
func (x *extraction) zip(ctx context.Context, r io.ReaderAt, size int64) error {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return usererr.Wrap(err, usererr.Invalid, ErrCorruptArchive.Message)
	}
	var declared uint64 // saturates: a declared size beyond any disk is refused all the same
	for _, f := range zr.File {
		declared = min(declared+min(f.UncompressedSize64, 1<<60)+entryMargin, 1<<62)
	}
	x.budget.ensure(int64(declared))
	if err := x.m.zipFits(zr); err != nil {
		return err
	}
	type job struct {
		f   *zip.File
		rel string
	}
	var files, links []job
	for _, f := range zr.File {
		rel, ok := x.entryName(f.Name)
		if !ok {
			x.skip()
			continue
		}
		mode := f.Mode()
		switch {
		case mode&fs.ModeSymlink != 0:
			x.links[rel] = true
			links = append(links, job{f, rel})
		case mode.IsDir() || mode.IsRegular():
			files = append(files, job{f, rel})
		default:
			x.skip()
		}
	}
	// Entries below a link of the archive are not written.
	keep := files[:0]
	for _, j := range files {
		if _, ok := x.entryName(j.f.Name); ok {
			keep = append(keep, j)
		} else {
			x.skip()
		}
	}
	files = keep
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			var dirs dirCache
			defer dirs.close()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(files) || ctx.Err() != nil {
					return
				}
				j := files[i]
				if err := x.zipEntry(&dirs, j.f, j.rel); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, j := range links {
		if err := x.entry(ctx, zipInfo(j.f)); err != nil {
			return err
		}
	}
	return nil
}

func (x *extraction) zipEntry(dirs *dirCache, f *zip.File, rel string) error {
	name := join(x.root, rel)
	mode := f.Mode()
	if mode.IsDir() {
		if err := x.mkdirs(dirs, name); err != nil {
			return x.skipDenied(err)
		}
		x.mu.Lock()
		x.dirs = append(x.dirs, dirMeta{name, mode.Perm(), f.Modified})
		x.res.Dirs++
		x.mu.Unlock()
		return nil
	}
	r, err := f.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	return x.file(dirs, name, mode.Perm(), f.Modified, r)
}

// zipInfo describes a zip entry the way the archives package does.
func zipInfo(f *zip.File) archives.FileInfo {
	return archives.FileInfo{
		FileInfo:      f.FileInfo(),
		Header:        f.FileHeader,
		NameInArchive: f.Name,
		Open:          func() (fs.File, error) { r, err := f.Open(); return zipFile{r, f.FileInfo()}, err },
	}
}

type zipFile struct {
	io.ReadCloser
	fi fs.FileInfo
}

func (z zipFile) Stat() (fs.FileInfo, error) { return z.fi, nil }

// zipFits refuses a zip whose declared uncompressed size exceeds the
// space left (the central directory may lie: the writes are bounded too).
func (m *Manager) zipFits(zr *zip.Reader) error {
	lim := m.FS.DiskLimit()
	if lim < 0 {
		return ErrNoSpace
	}
	if lim == 0 {
		return nil
	}
	var total int64
	for _, f := range zr.File {
		if total += int64(f.UncompressedSize64); total < 0 || m.FS.Usage()+total > lim {
			return ErrNoSpace
		}
	}
	return nil
}

type extraction struct {
	m       *Manager
	root    string
	journal io.Writer       // where entries are announced before they are made; nil: nowhere
	budget  *budget         // the isolated child's share of the disk limit; nil: the daemon's own count
	seq     dirCache        // the directory held open by the sequential formats (all but zip)
	tap     *archive.Tap    // tar's stream, read through it (decompress_sparse.go); nil for the other formats
	links   map[string]bool // links made by this archive (cleaned names below root)

	mu      sync.Mutex      // guards what follows (zip entries are written in parallel)
	known   map[string]bool // directories known to exist
	written []string        // files, links and directories this extraction created, in order
	made    map[string]bool // directories this extraction created (cleaned, relative), with mode 0755
	dirs    []dirMeta
	res     DecompressResult
}

func (x *extraction) skip() {
	x.mu.Lock()
	x.res.Skipped++
	x.mu.Unlock()
}

func (x *extraction) wroteFile(name string, n int64) {
	x.mu.Lock()
	x.written = append(x.written, name)
	x.res.Files++
	x.res.Bytes += n
	x.mu.Unlock()
}

type dirMeta struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

// entryName cleans an archive entry's name; ok is false for names that
// would leave the target (absolute, "..", NUL, below one of its links).
func (x *extraction) entryName(name string) (string, bool) {
	name = strings.ReplaceAll(name, "\\", "/")
	if name == "" || strings.HasPrefix(name, "/") || strings.IndexByte(name, 0) >= 0 {
		return "", false
	}
	for _, p := range strings.Split(name, "/") {
		if p == ".." {
			return "", false
		}
	}
	c := path.Clean(name)
	if c == "." {
		return "", false
	}
	for p := path.Dir(c); p != "."; p = path.Dir(p) {
		if x.links[p] {
			return "", false
		}
	}
	return c, true
}

func (x *extraction) entry(ctx context.Context, f archives.FileInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if x.tap != nil {
		// What the tar reader reads until this entry is handled is its
		// data; from then on, the next entry's headers.
		x.tap.Stop()
		defer x.tap.Start()
	}
	rel, ok := x.entryName(f.NameInArchive)
	if !ok {
		x.skip()
		return nil
	}
	name := join(x.root, rel)
	mode := f.Mode()
	if h, ok := f.Header.(*tar.Header); ok && h.Typeflag == tar.TypeLink {
		return x.hardlink(rel, name, f.LinkTarget)
	}
	switch {
	case mode.IsDir():
		if err := x.mkdirs(&x.seq, name); err != nil {
			return x.skipDenied(err)
		}
		x.mu.Lock()
		x.dirs = append(x.dirs, dirMeta{name, mode.Perm(), f.ModTime()})
		x.res.Dirs++
		x.mu.Unlock()
		return nil
	case mode&fs.ModeSymlink != 0:
		return x.symlink(rel, name, f)
	case mode.IsRegular():
		if h, ok := f.Header.(*tar.Header); ok && x.tap != nil {
			if done, err := x.sparseEntry(name, mode.Perm(), f.ModTime(), h); done {
				return err
			}
		}
		r, err := f.Open()
		if err != nil {
			return err
		}
		defer r.Close()
		return x.file(&x.seq, name, mode.Perm(), f.ModTime(), r)
	}
	x.skip() // device, FIFO, socket
	return nil
}

// skipDenied turns a denylist refusal into a skipped entry.
func (x *extraction) skipDenied(err error) error {
	if errors.Is(err, sandbox.ErrDenied) {
		x.skip()
		return nil
	}
	return err
}

// mkdirs creates name and its missing parents, remembering the new ones;
// directories already made or seen are not looked at again. A directory
// whose parent this extraction made is taken as missing without a look
// (archives list a directory's entries after it), and only the missing
// ones are made: a new directory costs one mkdir, where MkdirAll would try
// (and resolve from the root) every level of its path again; made through
// its parent held open when dirs has a stack (see mkdir).
func (x *extraction) mkdirs(dirs *dirCache, name string) error {
	c := strings.TrimPrefix(path.Clean("/"+name), "/")
	if c == "" || x.isKnown(c) {
		return nil
	}
	var missing []string
	for p := c; p != "." && p != ""; p = path.Dir(p) {
		if x.isKnown(p) {
			break
		}
		if !x.madeDir(path.Dir(p)) {
			_, err := x.m.FS.Lstat(p)
			if err == nil {
				break
			}
			if sandbox.IsPathLimit(err) {
				return err // refused at once, not once per prefix
			}
		}
		missing = append(missing, p)
	}
	if len(missing) == 0 {
		// c exists: MkdirAll checks it is a directory (or an in-root link
		// to one) and that it may be changed.
		if err := x.m.FS.MkdirAll(c, 0o755); err != nil {
			return err
		}
	}
	var made []string
	for i := len(missing) - 1; i >= 0; i-- {
		p := missing[i]
		if err := x.announce(journalDir, p); err != nil {
			return err
		}
		x.budget.ensure(entryMargin)
		err := x.mkdir(dirs, p)
		if err == nil {
			made = append(made, p)
		} else if !x.isDir(err, p) {
			return err
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, p := range made {
		x.written = append(x.written, p)
		x.made[p] = true
	}
	for p := c; p != "." && p != ""; p = path.Dir(p) {
		x.known[p] = true
	}
	return nil
}

// mkdir makes the directory p (cleaned, relative to the root) with mode
// 0755: through its parent on the directory stack of the sequential
// formats (one mkdirat, the parent usually open already since the archive
// listed it just before), else, or when the parent cannot be entered that
// way (an in-root link on the way), through the root. The path limits are
// those of FS.Mkdir.
func (x *extraction) mkdir(dirs *dirCache, p string) error {
	if _, err := sandbox.CleanName(p); err != nil {
		return x.m.FS.Mkdir(p, 0o755) // the sandbox's own refusal
	}
	if d := dirs.enter(path.Dir(p)); d != nil {
		return d.Mkdir(path.Base(p), 0o755)
	}
	return x.m.FS.Mkdir(p, 0o755)
}

func (x *extraction) madeDir(p string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.made[p]
}

func (x *extraction) isKnown(p string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.known[p]
}

// isDir reports whether a Mkdir of name failed only because the directory
// exists (another worker of this extraction, zip, made it first).
func (x *extraction) isDir(err error, name string) bool {
	if !errors.Is(err, sandbox.ErrExist) {
		return false
	}
	fi, serr := x.m.FS.Stat(name)
	return serr == nil && fi.IsDir()
}

// clear removes a link or file in the way of a new entry; a directory in
// the way of a file is an error.
func (x *extraction) clear(name string) error {
	fi, err := x.m.FS.Lstat(name)
	if errors.Is(err, sandbox.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return usererr.New(usererr.Invalid, fmt.Sprintf("Cannot extract the archive: %s is a directory.", display(name)))
	}
	return x.m.FS.Remove(name)
}

func (x *extraction) file(dirs *dirCache, name string, perm fs.FileMode, mtime time.Time, r io.Reader) error {
	dir := path.Dir("/" + name)
	if err := x.mkdirs(dirs, dir); err != nil {
		return x.skipDenied(err)
	}
	if perm == 0 {
		perm = 0o644
	}
	if err := x.announce(journalEntry, name); err != nil {
		return err
	}
	x.budget.ensure(entryMargin)
	w, err := x.create(dirs, dir, name, perm)
	if err != nil {
		return x.skipDenied(err)
	}
	n, err := dirs.copy(budgetWriter{w, x.budget}, r)
	if err == nil && !mtime.IsZero() {
		err = w.SetTimes(mtime, mtime)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	x.wroteFile(name, n)
	if err != nil {
		return err
	}
	return nil
}

// create makes the new file name exclusively. The usual case, nothing in
// the way, costs one openat relative to the directory held open in dirs
// (sandbox.Dir: no walk from the root, no link resolution, no descriptor
// check, which made the per-file sandbox OpenFile most of an extraction's
// CPU). Anything unusual takes the general path through the root: a file
// or link in the way (removed, a directory refused), a directory that is an
// in-root link (OpenDir does not follow it), any error.
func (x *extraction) create(dirs *dirCache, dir, name string, perm fs.FileMode) (*sandbox.File, error) {
	if d := dirs.open(x.m.FS, dir); d != nil {
		w, err := d.Create(path.Base(name), perm)
		if err == nil || errors.Is(err, sandbox.ErrDenied) || errors.Is(err, sandbox.ErrNoSpace) {
			return w, err
		}
	}
	w, err := x.m.FS.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if errors.Is(err, sandbox.ErrExist) {
		if err := x.clear(name); err != nil {
			return nil, err
		}
		w, err = x.m.FS.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	}
	return w, err
}

// dirCache holds the directory the last file was created in open, for the
// next one: archives list the files of a directory together. One goroutine
// uses it; it holds one descriptor at most, and that goroutine's copy
// buffer.
//
// With a stack (the sequential formats: tar, in the order its writer
// walked the tree), it holds the directories from the root down to the
// last one entered instead (sandbox.DirStack): the next entry's directory
// is usually that one, its parent or a child, reached by one openat from
// a held level where OpenDir walked from the root (and read the
// directory's name back from /proc) at each change of directory, and a
// missing directory is made by one mkdirat in its parent. A level is never
// entered through a symbolic link: a directory reached through an in-root
// link is not entered (nil), and the caller takes the general path through
// the root, which follows it, as OpenDir's refusal did.
type dirCache struct {
	name  string
	d     *sandbox.Dir
	bad   bool   // name could not be opened as a Dir
	buf   []byte // copyBuffer bytes, made on first use and kept by close
	stack *sandbox.DirStack
}

// enter is open for a name cleaned relative to the root ("." the root).
func (c *dirCache) enter(rel string) *sandbox.Dir {
	if c == nil || c.stack == nil {
		return nil
	}
	if c.bad && c.name == rel {
		return nil
	}
	d, err := c.stack.Enter(rel, false)
	c.name, c.bad = rel, err != nil
	if err != nil {
		return nil
	}
	return d
}

// readBuffer is the size of the reads of a sequential archive.
const readBuffer = 256 << 10

// copyBuffer is the size of the writes of an extracted file's data: a
// buffer filled before each write, one per goroutine for the whole
// extraction (io.Copy made a new 32 KiB one per file, the garbage of a
// whole tree's size, and wrote each decoder's read as it came, often a few
// KiB).
const copyBuffer = 256 << 10

// copy writes r to w through the buffer, each write but the last a full
// one, and returns the bytes written.
func (c *dirCache) copy(w io.Writer, r io.Reader) (int64, error) {
	if c.buf == nil {
		c.buf = make([]byte, copyBuffer)
	}
	var n int64
	for {
		m, rerr := fill(r, c.buf)
		if m > 0 {
			k, werr := w.Write(c.buf[:m])
			n += int64(k)
			if werr != nil {
				return n, werr
			}
			if k < m {
				return n, io.ErrShortWrite
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// fill reads into p until it is full or r ends (io.EOF) or fails (any
// other error, as r gave it: a truncated archive's io.ErrUnexpectedEOF
// stays an error).
func fill(r io.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := r.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (c *dirCache) open(fsys *sandbox.FS, name string) *sandbox.Dir {
	if c.stack != nil {
		rel := strings.TrimPrefix(path.Clean("/"+name), "/")
		if rel == "" {
			rel = "."
		}
		if _, err := sandbox.CleanName(rel); err != nil {
			return nil // refused on the general path, as by OpenDir
		}
		return c.enter(rel)
	}
	if c.name == name && (c.d != nil || c.bad) {
		return c.d
	}
	c.drop()
	c.name = name
	d, err := fsys.OpenDir(name)
	c.d, c.bad = d, err != nil
	return d
}

// drop closes the directory held open (not a stack's).
func (c *dirCache) drop() {
	if c.d != nil {
		_ = c.d.Close()
	}
	c.name, c.d, c.bad = "", nil, false
}

// close closes what c holds, and keeps its buffer.
func (c *dirCache) close() {
	c.drop()
	if c.stack != nil {
		c.stack.Close()
	}
	*c = dirCache{buf: c.buf}
}

func (x *extraction) symlink(rel, name string, f archives.FileInfo) error {
	target := f.LinkTarget
	if target == "" {
		// zip stores the target as the entry's contents
		r, err := f.Open()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(io.LimitReader(r, 4096))
		_ = r.Close()
		if err != nil {
			return err
		}
		target = string(b)
	}
	if target == "" {
		x.skip()
		return nil
	}
	if err := x.mkdirs(&x.seq, path.Dir("/"+name)); err != nil {
		return x.skipDenied(err)
	}
	if err := x.clear(name); err != nil {
		return err
	}
	if err := x.announce(journalEntry, name); err != nil {
		return err
	}
	x.budget.ensure(entryMargin)
	if err := x.m.FS.Symlink(target, name); err != nil {
		return x.skipDenied(err)
	}
	x.mu.Lock()
	x.written = append(x.written, name)
	x.links[rel] = true
	x.res.Links++
	x.mu.Unlock()
	return nil
}

// hardlink stores a copy of a regular file this archive extracted before,
// with its mode and time (a hard link shares them); any other target is
// skipped.
func (x *extraction) hardlink(rel, name, target string) error {
	t, ok := x.entryName(target)
	if !ok || t == rel {
		x.skip()
		return nil
	}
	tname := join(x.root, t)
	if !x.wrote(tname) {
		x.skip()
		return nil
	}
	src, err := x.m.FS.Open(tname)
	if err != nil {
		x.skip()
		return nil
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		x.skip()
		return nil
	}
	return x.file(&x.seq, name, fi.Mode().Perm(), fi.ModTime(), src)
}

func (x *extraction) wrote(name string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := len(x.written) - 1; i >= 0; i-- {
		if x.written[i] == name {
			return true
		}
	}
	return false
}

// single writes a single compressed file next to it, without its
// compression extension.
func (x *extraction) single(ctx context.Context, d archives.Decompressor, stream io.Reader, base string) error {
	out := strings.TrimSuffix(base, path.Ext(base))
	if out == "" || out == base {
		out = base + ".out"
	}
	rc, err := d.OpenReader(stream)
	if err != nil {
		return err
	}
	defer rc.Close()
	name := join(x.root, out)
	if x.m.FS.Denied(name) {
		return sandbox.ErrDenied
	}
	x.known[path.Clean("/" + x.root)[1:]] = true
	return x.file(&x.seq, name, 0o644, time.Time{}, sandbox.ContextReader(ctx, rc))
}

// rollback removes what the extraction created, newest first.
func (x *extraction) rollback() {
	for i := len(x.written) - 1; i >= 0; i-- {
		_ = x.m.FS.Remove(x.written[i])
	}
}

// finishDirs applies the directories' modes and times, deepest last
// written first, once their contents are in place.
func (x *extraction) finishDirs() {
	parents := &x.seq
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		c := strings.TrimPrefix(path.Clean("/"+d.name), "/")
		// A directory this extraction made already has mode 0755.
		if mode := d.mode | 0o700; d.mode != 0 && !(x.made[c] && mode == 0o755) {
			_ = x.m.FS.Chmod(d.name, mode)
		}
		if d.mtime.IsZero() {
			continue
		}
		// The times through the parent held open (siblings come together).
		if p := parents.open(x.m.FS, path.Dir("/"+c)); p != nil && c != "" {
			_ = p.Lchtimes(path.Base(c), d.mtime, d.mtime)
		} else {
			_ = x.m.FS.Lchtimes(d.name, d.mtime, d.mtime)
		}
	}
}

// userError turns an extraction failure into what the user sees.
func (x *extraction) userError(err error) error {
	if _, ok := usererr.From(err); ok {
		return err
	}
	var se *sandbox.Error
	switch {
	case errors.Is(err, sandbox.ErrNoSpace):
		return ErrNoSpace
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &se) && (se.Errno == syscall.EACCES || se.Errno == syscall.EPERM):
		// The isolated extraction runs as the server's user: a file or
		// directory of another owner in the server's tree refuses it.
		return usererr.Wrap(err, usererr.Invalid, fmt.Sprintf("Cannot extract the archive: %s is not writable by the server's user.", se.Path))
	case errors.As(err, &se):
		return err
	}
	return usererr.Wrap(err, usererr.Invalid, ErrCorruptArchive.Message)
}

func display(name string) string { return path.Clean("/" + name) }
