package eggconfig

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"testing"
)

// rootFS is a test implementation of FS on os.Root that follows the contract the sandbox
// implements: reads are size-checked before reading, writes go through a temporary file, fsync
// and rename into an existing directory, MkdirAll creates parents.
type rootFS struct {
	root *os.Root
}

func newRootFS(t testing.TB, dir string) *rootFS {
	t.Helper()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &rootFS{root: r}
}

func (r *rootFS) ReadFile(name string, limit int64) ([]byte, error) {
	f, err := r.root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s: %w", name, ErrFileTooLarge)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w", name, ErrFileTooLarge)
	}
	return data, nil
}

func (r *rootFS) WriteFileAtomic(name string, src io.Reader, perm fs.FileMode) error {
	dir := path.Dir(name)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(dir, "."+path.Base(name)+".tmp-"+hex.EncodeToString(rnd[:]))
	f, err := r.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, src)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = r.root.Chmod(tmp, perm) // not subject to the umask
	}
	if err == nil {
		err = r.root.Rename(tmp, name)
	}
	if err != nil {
		_ = r.root.Remove(tmp)
		return err
	}
	return nil
}

func (r *rootFS) MkdirAll(name string, perm fs.FileMode) error {
	return r.root.MkdirAll(name, perm)
}

func newTestLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
