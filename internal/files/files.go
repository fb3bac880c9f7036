package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/usererr"
)

// Reader runs the file manager's reading operations (stat, contents,
// listing, search) on the read-only view of one server's sandbox: what
// needs no job (issue 38 §2).
type Reader struct {
	FS sandbox.ReadOnly
}

// NewReader returns the file manager's reader of fsys.
func NewReader(fsys sandbox.ReadOnly) *Reader { return &Reader{FS: fsys} }

// Manager runs the file manager's operations on one server's sandbox: its
// changes through FS, the writable filesystem of the job that holds the
// server's job slot (server.Job.FS), its reads as Reader does.
type Manager struct {
	Reader
	FS *sandbox.FS
	// Level is the gzip level of compressed archives (archive.ParseLevel).
	Level int
	// TempDir is where archive readers that need a seekable copy spool it;
	// os.TempDir() when empty.
	TempDir string
	// Isolation, when set, makes Decompress decode in a child process
	// (decompress_isolated.go).
	Isolation *Isolation
}

// New returns the file manager of fsys.
func New(fsys *sandbox.FS) *Manager {
	return &Manager{Reader: Reader{FS: fsys.ReadOnly()}, FS: fsys, Level: 1}
}

// join names name inside the directory root (both as the panel sends them:
// "/" or "" for the server root). Cleaning, and refusing names that climb
// out, is the sandbox's job.
func join(root, name string) string {
	if root == "" {
		return name
	}
	return root + "/" + name
}

// isRoot reports whether name is the server root itself.
func isRoot(name string) bool { return path.Clean("/"+name) == "/" }

// ---- listing (listing.go) ----

// mimeOf types a regular file: by extension for the common text types,
// empty files without reading, others from their head.
func (m *Reader) mimeOf(fi fs.FileInfo, head []byte, open func() (*sandbox.File, error)) string {
	if fi.Size() == 0 {
		return MimeText
	}
	if t := mimeByName(fi.Name()); t != "" {
		return t
	}
	f, err := open()
	if err != nil {
		return MimeBinary // denylisted, or gone
	}
	n, _ := f.ReadAt(head, 0)
	_ = f.Close()
	return DetectMime(fi.Name(), head[:n])
}

// mimeOfEntry is mimeOf for an entry Walk is reporting: its head is read
// relative to the walked directory, without an *os.File.
func (m *Reader) mimeOfEntry(fi fs.FileInfo, head []byte, rel string, d fs.DirEntry) string {
	if fi.Size() == 0 {
		return MimeText
	}
	if t := mimeByName(fi.Name()); t != "" {
		return t
	}
	n, err := m.FS.ReadHead(rel, d, head)
	if err != nil {
		return MimeBinary
	}
	return DetectMime(fi.Name(), head[:n])
}

// StatOf describes name (lstat) with its mime type.
func (m *Reader) StatOf(name string) (Stat, error) {
	fi, err := m.FS.Lstat(name)
	if err != nil {
		return Stat{}, err
	}
	mime := MimeBinary
	switch {
	case fi.IsDir():
		mime = MimeDirectory
	case fi.Mode().IsRegular():
		mime = m.mimeOf(fi, make([]byte, sniffLen), func() (*sandbox.File, error) { return m.FS.Open(name) })
	}
	return NewStat(fi, mime), nil
}

// ---- reading ----

// Contents is an open regular file for the contents route.
type Contents struct {
	File *sandbox.File
	Info fs.FileInfo
	Mime string
}

// Open opens name for reading its contents: a directory is ErrIsDirectory,
// pipes, sockets and devices are ErrFileType (refused before anything is
// sent). The caller closes Contents.File.
func (m *Reader) Open(name string) (*Contents, error) {
	f, err := m.FS.Open(name)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	switch {
	case fi.IsDir():
		_ = f.Close()
		return nil, ErrIsDirectory
	case !fi.Mode().IsRegular():
		_ = f.Close()
		return nil, ErrFileType
	}
	head := make([]byte, sniffLen)
	n, _ := f.ReadAt(head, 0)
	return &Contents{File: f, Info: fi, Mime: DetectMime(fi.Name(), head[:n])}, nil
}

// ---- writing ----

// errShortBody: the body ended before its declared length.
var errShortBody = usererr.New(usererr.Invalid, "The request body is shorter than its Content-Length.")

// Write replaces the contents of name with exactly length bytes of r,
// creating missing parent directories. The bytes go to a temporary file
// that is renamed over name once complete: name never holds part of them.
// An existing file keeps its permission bits; a new one is 0644.
func (m *Manager) Write(name string, r io.Reader, length int64) error {
	if length < 0 {
		return ErrMissingLength
	}
	if isRoot(name) {
		return ErrWriteOnDir
	}
	var perm fs.FileMode = 0o644
	if fi, err := m.FS.Lstat(name); err == nil {
		if fi.IsDir() {
			return ErrWriteOnDir
		}
		if fi.Mode().IsRegular() {
			perm = fi.Mode().Perm()
		}
	} else if !errors.Is(err, sandbox.ErrNotExist) {
		return err
	}
	if dir := path.Dir("/" + name); dir != "/" {
		if _, err := m.FS.Stat(dir); errors.Is(err, sandbox.ErrNotExist) {
			if err := m.FS.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
	}
	body := &exactReader{r: r, left: length}
	err := m.FS.WriteFileAtomic(name, body, perm)
	if err != nil && body.short {
		return errShortBody
	}
	return err
}

// exactReader reads exactly left bytes, and notes a body that ends early.
type exactReader struct {
	r     io.Reader
	left  int64
	short bool
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		e.short = true
		return n, io.ErrUnexpectedEOF
	}
	if err != nil && err != io.EOF {
		e.short = true
	}
	if e.left == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

// Rename is one move of a rename request.
type Rename struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// RenameAll moves each pair (names relative to root), in order. A missing
// source is skipped, as Wings does; an existing destination stops with
// ErrDestExists. Missing parents of a destination are created. ctx stops
// the denylist walk of a directory being moved.
func (m *Manager) RenameAll(ctx context.Context, root string, pairs []Rename) error {
	if len(pairs) == 0 {
		return ErrNoRenames
	}
	for _, p := range pairs {
		from, to := join(root, p.From), join(root, p.To)
		if _, err := m.FS.Lstat(from); errors.Is(err, sandbox.ErrNotExist) {
			continue
		}
		err := m.FS.RenameContext(ctx, from, to)
		switch {
		case errors.Is(err, sandbox.ErrExist):
			return ErrDestExists
		case errors.Is(err, sandbox.ErrInvalid):
			return usererr.Wrap(err, usererr.Invalid, "The root directory of the server cannot be moved or renamed.")
		case err != nil:
			return err
		}
	}
	return nil
}

// Copy duplicates the regular file location next to itself as "name
// copy.ext", "name copy 1.ext" … (".tar.gz" and the like count as one
// extension), and returns the new name. A copy still running when ctx ends
// stops and leaves nothing.
func (m *Manager) Copy(ctx context.Context, location string) (string, error) {
	fi, err := m.FS.Stat(location)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", ErrCopyType
	}
	dir, file := path.Split(path.Clean("/" + location))
	for i := 0; ; i++ {
		name := copyName(file, i, time.Now())
		if name == "" {
			return "", usererr.New(usererr.Conflict, "Too many copies of this file exist already.")
		}
		err := m.FS.CopyContext(ctx, location, dir+name)
		switch {
		case err == nil:
			return dir + name, nil
		case errors.Is(err, sandbox.ErrExist):
			continue
		case errors.Is(err, sandbox.ErrIsDir), errors.Is(err, sandbox.ErrInvalid):
			return "", ErrCopyType
		default:
			return "", err
		}
	}
}

// copyName is the i-th candidate name for a copy of file; "" when there
// are no more candidates.
func copyName(file string, i int, now time.Time) string {
	base, ext := splitExt(file)
	switch {
	case i == 0:
		return base + " copy" + ext
	case i <= 50:
		return base + " copy " + strconv.Itoa(i) + ext
	case i <= 60:
		return fmt.Sprintf("%s copy.%s-%d%s", base, now.Format("2006-01-02T150405"), i-50, ext)
	}
	return ""
}

// splitExt splits a file name into its base and extension, with ".tar.gz"
// (".tar.anything") as one extension and a leading dot part of the base.
func splitExt(file string) (string, string) {
	if i := strings.Index(file, ".tar."); i > 0 {
		return file[:i], file[i:]
	}
	ext := path.Ext(file)
	if ext == file {
		return file, ""
	}
	return strings.TrimSuffix(file, ext), ext
}

// Mkdir creates the directory name inside dir and its missing parents.
func (m *Manager) Mkdir(dir, name string) error {
	err := m.FS.MkdirAll(join(dir, name), 0o755)
	if errors.Is(err, sandbox.ErrNotDir) {
		return ErrMkdirNotDir
	}
	return err
}

// Delete removes each name (relative to root) with everything below it; a
// link is removed as a link. Missing names are not an error. The root
// itself is refused before anything is deleted.
func (m *Manager) Delete(ctx context.Context, root string, names []string) error {
	if len(names) == 0 {
		return ErrNoDeletes
	}
	for _, n := range names {
		if isRoot(join(root, n)) {
			return ErrDeleteRoot
		}
	}
	for _, n := range names {
		if err := m.FS.RemoveAll(ctx, join(root, n)); err != nil {
			return err
		}
	}
	return nil
}

// Chmod is one entry of a chmod request; Mode is an octal string.
type Chmod struct {
	File string `json:"file"`
	Mode string `json:"mode"`
}

// ParseMode parses an octal permission string ("755"); setuid, setgid and
// sticky are refused.
func ParseMode(s string) (fs.FileMode, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 8, 32)
	if err != nil {
		return 0, ErrBadMode
	}
	if v&^0o777 != 0 {
		return 0, ErrSpecialBits
	}
	return fs.FileMode(v), nil
}

// ChmodAll applies every entry (all modes are checked first). Missing
// files and symbolic links are skipped: a link has no mode of its own, and
// its target is never changed through it. The mode of a directory is its
// own (nothing below it changes); ctx stops its denylist walk.
func (m *Manager) ChmodAll(ctx context.Context, root string, entries []Chmod) error {
	if len(entries) == 0 {
		return ErrNoChmods
	}
	modes := make([]fs.FileMode, len(entries))
	for i, e := range entries {
		mode, err := ParseMode(e.Mode)
		if err != nil {
			return err
		}
		modes[i] = mode
	}
	for i, e := range entries {
		name := join(root, e.File)
		fi, err := m.FS.Lstat(name)
		if errors.Is(err, sandbox.ErrNotExist) || (err == nil && fi.Mode()&fs.ModeSymlink != 0) {
			continue
		}
		if err != nil {
			return err
		}
		if err := m.FS.ChmodContext(ctx, name, modes[i]); err != nil {
			if errors.Is(err, sandbox.ErrInvalid) {
				continue // swapped for a link meanwhile: still never followed
			}
			return err
		}
	}
	return nil
}
