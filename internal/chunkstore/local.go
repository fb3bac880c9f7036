package chunkstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/atomicfile"
)

// LocalBackend is a Backend in a directory of the node's disk. An object
// is a file under its name; Put writes a temporary file next to it
// (".<name>.tmp-*", never listed), fsyncs it, renames it and fsyncs the
// directory, so a name only ever holds a whole, durable object.
type LocalBackend struct {
	dir string
}

// NewLocalBackend is the backend in dir (created when absent).
func NewLocalBackend(dir string) (*LocalBackend, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &LocalBackend{dir: dir}, nil
}

// Dir is the backend's directory.
func (b *LocalBackend) Dir() string { return b.dir }

// path checks name (a relative slash path, no "." or ".." element) and
// returns its file.
func (b *LocalBackend) path(name string) (string, error) {
	if name == "" || path.IsAbs(name) || path.Clean(name) != name || strings.HasPrefix(name, "../") || name == ".." {
		return "", fmt.Errorf("invalid object name %q", name)
	}
	for _, el := range strings.Split(name, "/") {
		if el == "" || el[0] == '.' {
			return "", fmt.Errorf("invalid object name %q", name)
		}
	}
	return filepath.Join(b.dir, filepath.FromSlash(name)), nil
}

// Put writes data under name atomically and durably.
func (b *LocalBackend) Put(ctx context.Context, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := b.path(name)
	if err != nil {
		return err
	}
	if err := b.mkdirs(filepath.Dir(p)); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(p, data, 0o600); err != nil {
		return err
	}
	dropCache(p)
	return nil
}

// Stage writes data to a temporary file next to name's (one that
// clearTemps removes after a crash), fsynced: Publish renames it.
func (b *LocalBackend) Stage(ctx context.Context, name string, data []byte) (Staged, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := b.path(name)
	if err != nil {
		return nil, err
	}
	if err := b.mkdirs(filepath.Dir(p)); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return nil, err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED) // see dropCache
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return nil, err
	}
	return &localStaged{tmp: f.Name(), path: p}, nil
}

// localStaged is a synced temporary file waiting for its rename.
type localStaged struct {
	tmp, path string
}

// Publish renames the file into place and fsyncs its directory.
func (s *localStaged) Publish() error {
	if err := atomicfile.Commit(s.tmp, s.path); err != nil {
		_ = os.Remove(s.tmp)
		return err
	}
	return nil
}

func (s *localStaged) Discard() { _ = os.Remove(s.tmp) }

// dropCache tells the kernel that the pages of the file at p, synced
// already, are not needed: a backup writes gigabytes that are read again
// only by a restore, and keeping them cached would push out what the game
// servers read (the archive format leaves that to the kernel's
// writeback). It also lets the next pack reuse the pages just freed
// instead of new ones. Best effort.
func dropCache(p string) {
	f, err := os.Open(p)
	if err != nil {
		return
	}
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	_ = f.Close()
}

// mkdirs creates dir and its missing parents, fsyncing the parent of each
// directory it creates so that the new directory survives a crash.
func (b *LocalBackend) mkdirs(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if dir != b.dir {
		if err := b.mkdirs(filepath.Dir(dir)); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// Get reads length bytes at off of name (to the end when length < 0).
func (b *LocalBackend) Get(ctx context.Context, name string, off, length int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := b.path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, missingIfNotDir(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if off < 0 || off > fi.Size() {
		return nil, fmt.Errorf("object %s: offset %d outside its %d bytes", name, off, fi.Size())
	}
	if length < 0 {
		length = fi.Size() - off
	}
	buf := make([]byte, length)
	n, err := f.ReadAt(buf, off)
	if err == io.EOF && int64(n) == length {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("object %s: reading %d bytes at %d: %w", name, length, off, err)
	}
	return buf, nil
}

// List returns the objects whose names start with prefix, by name.
func (b *LocalBackend) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	root := b.dir
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		p, err := b.path(prefix[:i])
		if err != nil {
			return nil, err
		}
		root = p
	}
	var out []ObjectInfo
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() && p != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(b.dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if !strings.HasPrefix(name, prefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		out = append(out, ObjectInfo{Name: name, Size: fi.Size(), ModTime: fi.ModTime()})
		return ctx.Err()
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// Delete removes name and fsyncs its directory.
func (b *LocalBackend) Delete(ctx context.Context, name string) error {
	p, err := b.path(name)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return syncDir(filepath.Dir(p))
}

// clearTemps removes what a crash left of Puts (the temporary files).
func (b *LocalBackend) clearTemps() {
	_ = filepath.WalkDir(b.dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), ".") && strings.Contains(d.Name(), ".tmp-") {
			_ = os.Remove(p)
		}
		return nil
	})
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
