package files

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	kflate "github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zip"
	"github.com/mholt/archives"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/sandbox"
)

// CompressRequest is the body of the compress route.
type CompressRequest struct {
	Root      string   `json:"root"`
	Files     []string `json:"files"`
	Name      string   `json:"name"`
	Extension string   `json:"extension"`
}

// archiveKinds maps the extensions the panels send to the canonical one.
var archiveKinds = map[string]string{
	"": "tar.gz", "tar.gz": "tar.gz", "tgz": "tar.gz",
	"zip": "zip", "tar": "tar",
	"tar.bz2": "tar.bz2", "tbz2": "tar.bz2",
	"tar.xz": "tar.xz", "txz": "tar.xz",
	"tar.zst": "tar.zst", "tzst": "tar.zst",
}

// Compress archives the selected names (relative to Root, each with
// everything below it) into a new archive in Root and describes it.
// Symbolic links are stored as links, denylisted files are left out, and
// the archive never overwrites a file: a second archive made in the same
// second gets another name. Out of disk before starting is
// ErrCompressSpace; crossing the limit while writing stops the archive,
// removes it and is ErrNoSpace.
func (m *Manager) Compress(ctx context.Context, req CompressRequest) (Stat, error) {
	if len(req.Files) == 0 {
		return Stat{}, ErrNoCompress
	}
	kind, ok := archiveKinds[strings.ToLower(strings.TrimPrefix(req.Extension, "."))]
	if !ok {
		return Stat{}, ErrBadExtension
	}
	if lim := m.FS.DiskLimit(); lim < 0 || (lim > 0 && m.FS.Usage() >= lim) {
		return Stat{}, ErrCompressSpace
	}
	base, err := archiveBase(req.Name, kind)
	if err != nil {
		return Stat{}, err
	}
	if fi, err := m.FS.Stat(req.Root); err != nil {
		return Stat{}, err
	} else if !fi.IsDir() {
		return Stat{}, ErrNotDirectory
	}
	out, name, err := m.createUnique(req.Root, base, kind)
	if err != nil {
		return Stat{}, err
	}
	archiveRel := strings.TrimPrefix(path.Clean("/"+name), "/")
	rootRel := strings.TrimPrefix(path.Clean("/"+req.Root), "/")
	sel := selection(req.Files)
	skip := func(rel string, d fs.DirEntry) bool {
		full := rel
		if rootRel != "" {
			full = rootRel + "/" + rel
		}
		if full == archiveRel || m.FS.DeniedWalkEntry(full, d) {
			return true
		}
		return !sel.includes(rel, d.IsDir())
	}
	if kind == "zip" {
		err = m.writeZip(ctx, out, req.Root, skip)
	} else {
		opts := archive.WriteOptions{Dir: req.Root, Skip: skip, Level: m.Level}
		if c := compressor(kind); c != nil {
			opts.Compress = c
		}
		_, err = archive.Write(ctx, out, m.FS, opts)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = m.FS.Remove(name)
		if errors.Is(err, sandbox.ErrNoSpace) {
			return Stat{}, ErrNoSpace
		}
		return Stat{}, unreadable(err, "the archive was not made.")
	}
	st, err := m.StatOf(name)
	if err == nil && kind == "tar.gz" {
		st.Mime = MimeTarGzip
	}
	return st, err
}

// archiveBase is the archive's name without extension: the given name (a
// plain file name, its extension dropped when it repeats the kind), or
// archive-<time> as Wings names them.
func archiveBase(name, kind string) (string, error) {
	if name == "" {
		return "archive-" + strings.ReplaceAll(time.Now().Format(time.RFC3339), ":", ""), nil
	}
	if strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return "", ErrBadArchiveName
	}
	return strings.TrimSuffix(name, "."+kind), nil
}

// createUnique creates the archive file exclusively: base.kind, then
// base-1.kind … when the name is taken.
func (m *Manager) createUnique(root, base, kind string) (*sandbox.File, string, error) {
	for i := 0; i < 1000; i++ {
		n := base
		if i > 0 {
			n += "-" + strconv.Itoa(i)
		}
		name := join(root, n+"."+kind)
		f, err := m.FS.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, sandbox.ErrExist) {
			continue
		}
		if errors.Is(err, sandbox.ErrNoSpace) {
			return nil, "", ErrCompressSpace
		}
		return f, name, err
	}
	return nil, "", ErrDestExists
}

// compressor returns the stream compressor of a tar kind; nil for tar.gz
// (the archive package's parallel gzip).
func compressor(kind string) func(io.Writer) (io.WriteCloser, error) {
	switch kind {
	case "tar":
		return func(w io.Writer) (io.WriteCloser, error) { return nopCloser{w}, nil }
	case "tar.bz2":
		return archives.Bz2{}.OpenWriter
	case "tar.xz":
		return archives.Xz{}.OpenWriter
	case "tar.zst":
		return archives.Zstd{}.OpenWriter
	}
	return nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// selected is the set of names chosen for an archive, cleaned relative to
// its root.
type selected map[string]bool

func selection(names []string) selected {
	s := selected{}
	for _, n := range names {
		c := strings.TrimPrefix(path.Clean("/"+n), "/")
		if c == "" {
			c = "."
		}
		s[c] = true
	}
	return s
}

// includes reports whether rel is chosen, lies below a chosen name, or is
// a directory on the way to one.
func (s selected) includes(rel string, dir bool) bool {
	if s["."] {
		return true
	}
	for p := rel; ; {
		if s[p] {
			return true
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	if dir {
		for n := range s {
			if strings.HasPrefix(n, rel+"/") {
				return true
			}
		}
	}
	return false
}

// writeZip writes a zip of the tree at root (names relative to it).
func (m *Manager) writeZip(ctx context.Context, out io.Writer, root string, skip func(string, fs.DirEntry) bool) error {
	zw := zip.NewWriter(out)
	level := m.Level
	if level < kflate.HuffmanOnly || level > kflate.BestCompression {
		level = kflate.BestSpeed
	}
	zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) { return kflate.NewWriter(w, level) })
	rootRel := strings.TrimPrefix(path.Clean("/"+root), "/")
	buf := make([]byte, 256<<10)
	err := m.FS.WalkContext(ctx, root, func(full string, d fs.DirEntry, err error) error {
		rel := full
		if rootRel != "" {
			rel = strings.TrimPrefix(strings.TrimPrefix(full, rootRel), "/")
		}
		if err != nil {
			if rel == "" || rel == "." || !sandbox.Vanished(err) {
				return err // a part of the tree could not be read
			}
			return nil // removed or swapped during the walk
		}
		if rel == "" || rel == "." {
			return nil
		}
		if skip(rel, d) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			h, _ := zip.FileInfoHeader(fi)
			h.Name = rel + "/"
			_, err := zw.CreateHeader(h)
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := m.FS.ReadlinkEntry(full, d)
			if err != nil {
				return vanishedIsNil(err)
			}
			h, _ := zip.FileInfoHeader(fi)
			h.Name, h.Method = rel, zip.Store
			w, err := zw.CreateHeader(h)
			if err != nil {
				return err
			}
			_, err = io.WriteString(w, target)
			return err
		case fi.Mode().IsRegular():
			f, err := m.FS.OpenEntry(full, d)
			if err != nil {
				if errors.Is(err, sandbox.ErrDenied) {
					return nil // a directory on its way renamed into a denied place
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
			h, _ := zip.FileInfoHeader(fi)
			h.Name, h.Method = rel, zip.Deflate
			w, err := zw.CreateHeader(h)
			if err != nil {
				return err
			}
			// Checked per chunk: a huge (even sparse) file stops being read
			// as soon as the caller is gone.
			_, err = io.CopyBuffer(w, io.LimitReader(sandbox.ContextReader(ctx, readOnly{f}), fi.Size()), buf)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return zw.Close()
}

// vanishedIsNil leaves out an entry that went away during the walk (see
// sandbox.Vanished) and keeps any other error.
func vanishedIsNil(err error) error {
	if sandbox.Vanished(err) {
		return nil
	}
	return err
}

// readOnly hides a file's other methods so that io.CopyBuffer uses the buffer.
type readOnly struct{ r io.Reader }

func (r readOnly) Read(p []byte) (int, error) { return r.r.Read(p) }
