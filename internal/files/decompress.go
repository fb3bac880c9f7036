package files

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/klauspost/compress/zip"
	"github.com/mholt/archives"

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
func (m *Manager) Decompress(ctx context.Context, root, file string) (DecompressResult, error) {
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
	x := &extraction{m: m, root: root, links: map[string]bool{}}
	switch f := format.(type) {
	case archives.Zip:
		if err := m.zipFits(src, fi.Size()); err != nil {
			return x.res, err
		}
		err = f.Extract(ctx, stream, x.entry)
	case archives.CompressedArchive:
		if gz, ok := f.Compression.(archives.Gz); ok {
			gz.Multithreaded = true
			f.Compression = gz
		}
		err = f.Extract(ctx, stream, x.entry)
	case archives.Extractor:
		err = f.Extract(ctx, stream, x.entry)
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

// zipFits refuses a zip whose declared uncompressed size exceeds the
// space left (the central directory may lie: the writes are bounded too).
func (m *Manager) zipFits(r io.ReaderAt, size int64) error {
	lim := m.FS.DiskLimit()
	if lim == 0 {
		return nil
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return usererr.Wrap(err, usererr.Invalid, ErrCorruptArchive.Message)
	}
	var total int64
	for _, f := range zr.File {
		if total += int64(f.UncompressedSize64); total < 0 || (lim > 0 && m.FS.Usage()+total > lim) {
			return ErrNoSpace
		}
	}
	if lim < 0 {
		return ErrNoSpace
	}
	return nil
}

type extraction struct {
	m       *Manager
	root    string
	links   map[string]bool // links made by this archive (cleaned names below root)
	written []string        // files, links and directories this extraction created, in order
	dirs    []dirMeta
	res     DecompressResult
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
	rel, ok := x.entryName(f.NameInArchive)
	if !ok {
		x.res.Skipped++
		return nil
	}
	name := join(x.root, rel)
	if x.m.FS.Denied(name) {
		x.res.Skipped++
		return nil
	}
	mode := f.Mode()
	if h, ok := f.Header.(*tar.Header); ok && h.Typeflag == tar.TypeLink {
		return x.hardlink(rel, name, f.LinkTarget)
	}
	switch {
	case mode.IsDir():
		if err := x.mkdirs(name); err != nil {
			return err
		}
		x.dirs = append(x.dirs, dirMeta{name, mode.Perm(), f.ModTime()})
		x.res.Dirs++
		return nil
	case mode&fs.ModeSymlink != 0:
		return x.symlink(rel, name, f)
	case mode.IsRegular():
		r, err := f.Open()
		if err != nil {
			return err
		}
		defer r.Close()
		return x.file(name, mode.Perm(), f.ModTime(), r)
	}
	x.res.Skipped++ // device, FIFO, socket
	return nil
}

// mkdirs creates name and its missing parents, remembering the new ones.
func (x *extraction) mkdirs(name string) error {
	c := strings.TrimPrefix(path.Clean("/"+name), "/")
	if c == "" {
		return nil
	}
	var missing []string
	for p := c; p != "." && p != ""; p = path.Dir(p) {
		if _, err := x.m.FS.Lstat(p); err == nil {
			break
		}
		missing = append(missing, p)
	}
	if err := x.m.FS.MkdirAll(c, 0o755); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		x.written = append(x.written, missing[i])
	}
	return nil
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

func (x *extraction) file(name string, perm fs.FileMode, mtime time.Time, r io.Reader) error {
	if err := x.mkdirs(path.Dir("/" + name)); err != nil {
		return err
	}
	if err := x.clear(name); err != nil {
		return err
	}
	if perm == 0 {
		perm = 0o644
	}
	w, err := x.m.FS.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	x.written = append(x.written, name)
	n, err := io.Copy(w, readOnly{r})
	x.res.Bytes += n
	if err == nil && !mtime.IsZero() {
		err = w.SetTimes(mtime, mtime)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		x.res.Files++
	}
	return err
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
		x.res.Skipped++
		return nil
	}
	if err := x.mkdirs(path.Dir("/" + name)); err != nil {
		return err
	}
	if err := x.clear(name); err != nil {
		return err
	}
	if err := x.m.FS.Symlink(target, name); err != nil {
		return err
	}
	x.written = append(x.written, name)
	x.links[rel] = true
	x.res.Links++
	return nil
}

// hardlink stores a copy of a regular file this archive extracted before;
// any other target is skipped.
func (x *extraction) hardlink(rel, name, target string) error {
	t, ok := x.entryName(target)
	if !ok || t == rel {
		x.res.Skipped++
		return nil
	}
	tname := join(x.root, t)
	if !x.wrote(tname) {
		x.res.Skipped++
		return nil
	}
	if fi, err := x.m.FS.Lstat(tname); err != nil || !fi.Mode().IsRegular() {
		x.res.Skipped++
		return nil
	}
	if err := x.clear(name); err != nil {
		return err
	}
	if err := x.m.FS.Copy(tname, name); err != nil {
		return err
	}
	x.written = append(x.written, name)
	x.res.Files++
	return nil
}

func (x *extraction) wrote(name string) bool {
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
	return x.file(name, 0o644, time.Time{}, ctxReader{ctx, rc})
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
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
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if d.mode != 0 {
			_ = x.m.FS.Chmod(d.name, d.mode|0o700)
		}
		if !d.mtime.IsZero() {
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
	case errors.As(err, &se):
		return err
	}
	return usererr.Wrap(err, usererr.Invalid, ErrCorruptArchive.Message)
}

func display(name string) string { return path.Clean("/" + name) }
