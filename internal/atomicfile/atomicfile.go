// Package atomicfile writes files so that a reader, or the next boot after a
// crash, sees either the old content or the new content, never a mix.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteFile writes data to path atomically with the given permissions.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write creates a temporary file next to path, lets fill write it, fsyncs it,
// renames it over path and fsyncs the directory. On any error the temporary
// file is removed and path is untouched.
func Write(path string, perm os.FileMode, fill func(w io.Writer) error) error {
	return write(path, perm, fill, nil)
}

// write is Write; beforeRename, when set, runs after the data is durable
// and before the rename (tests simulate a crash at the worst moment).
func write(path string, perm os.FileMode, fill func(w io.Writer) error, beforeRename func(tmp string)) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	if err = fill(f); err != nil {
		return fmt.Errorf("atomicfile: write %s: %w", filepath.Base(path), err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	if beforeRename != nil {
		beforeRename(tmp)
	}
	return Commit(tmp, path)
}

// Commit renames a complete, already synced file over path and syncs the
// directory, for callers that stream a large file themselves (backups).
func Commit(tmp, path string) error {
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("atomicfile: sync dir: %w", err)
	}
	return nil
}
