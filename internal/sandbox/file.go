package sandbox

import (
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// File is a file opened through an FS. Its errors name the file by its
// path relative to the root. A File opened for writing reserves, before
// each write, the blocks the write may allocate, and fails with ErrNoSpace
// (writing nothing of that call) when the limit would be crossed; after
// the write the usage is settled to what the file really occupies (see
// accounting.go). A File is not safe for concurrent use.
type File struct {
	f   *os.File
	s   *state
	rel string

	write      bool
	appendMode bool
	pos        int64
	node       *openNode       // the inode's entry in the open table (writable files only)
	rc         syscall.RawConn // f's, for the fstat after each write (writable files only)
}

// Name returns the name relative to the root, with a leading "/".
func (w *File) Name() string { return display(w.rel) }

// OSFile returns the underlying *os.File of a file opened for reading, for
// zero-copy serving (http.ServeContent, sendfile); nil for a file opened
// for writing (writes must go through the File to be counted). Its Name()
// and its errors contain the host path: never show them to a user.
func (w *File) OSFile() *os.File {
	if w.write {
		return nil
	}
	return w.f
}

func (w *File) Read(p []byte) (int, error) {
	n, err := w.f.Read(p)
	w.pos += int64(n)
	return n, w.ioErr("read", err)
}

// ReadAt reads at an offset.
func (w *File) ReadAt(p []byte, off int64) (int, error) {
	n, err := w.f.ReadAt(p, off)
	return n, w.ioErr("read", err)
}

// Seek sets the offset for the next Read or Write.
func (w *File) Seek(offset int64, whence int) (int64, error) {
	n, err := w.f.Seek(offset, whence)
	if err == nil {
		w.pos = n
	}
	return n, w.ioErr("seek", err)
}

// Write writes p at the current offset (at the end with O_APPEND).
func (w *File) Write(p []byte) (int, error) {
	off := w.pos
	if w.appendMode && w.node != nil {
		off = w.s.endOf(w.node)
	}
	n, err := w.writeAt(p, off, false)
	w.pos = off + int64(n)
	return n, err
}

// WriteAt writes p at offset off.
func (w *File) WriteAt(p []byte, off int64) (int, error) {
	return w.writeAt(p, off, true)
}

// WriteString writes s.
func (w *File) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

func (w *File) writeAt(p []byte, off int64, at bool) (int, error) {
	if !w.write || w.node == nil {
		return 0, newErr("write", w.rel, ErrInvalid)
	}
	grow := w.s.growth(w.node, off, int64(len(p)))
	if err := w.s.reserve(grow); err != nil {
		return 0, newErr("write", w.rel, ErrNoSpace)
	}
	var n int
	var err error
	if at {
		n, err = w.f.WriteAt(p, off)
	} else {
		n, err = w.f.Write(p)
	}
	w.s.settle(w, grow)
	return n, w.ioErr("write", err)
}

// Truncate changes the size of the file. Growing it allocates nothing (the
// new part is a hole): what later writes put there is counted then. The
// usage is settled to what the file occupies after, whichever handle or
// name truncated it.
func (w *File) Truncate(size int64) error {
	if !w.write || w.node == nil {
		return newErr("truncate", w.rel, ErrInvalid)
	}
	err := w.f.Truncate(size)
	w.s.settle(w, 0)
	return w.ioErr("truncate", err)
}

// Stat returns the FileInfo of the open file.
func (w *File) Stat() (fs.FileInfo, error) {
	fi, err := w.f.Stat()
	return fi, w.ioErr("stat", err)
}

// ReadDir reads the entries of an open directory (see os.File.ReadDir).
func (w *File) ReadDir(n int) ([]fs.DirEntry, error) {
	d, err := w.f.ReadDir(n)
	return d, w.ioErr("readdir", err)
}

// Sync commits the file to stable storage.
func (w *File) Sync() error { return w.ioErr("sync", w.f.Sync()) }

// SetTimes sets the access and modification times of the open file: one
// utimensat on its descriptor with no path (futimens), where unix.Futimes
// goes through /proc/self/fd and Lchtimes resolves the path again. Set them
// after the last write, which would move the mtime.
func (w *File) SetTimes(atime, mtime time.Time) error {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return w.ioErr("chtimes", err)
	}
	ts := [2]unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	var uerr error
	if err := rc.Control(func(fd uintptr) {
		if _, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, fd, 0, uintptr(unsafe.Pointer(&ts)), 0, 0, 0); e != 0 {
			uerr = e
		}
	}); err != nil {
		return w.ioErr("chtimes", err)
	}
	return w.ioErr("chtimes", uerr)
}

// Close closes the file. The last handle of a removed file gives its
// blocks back to the usage.
func (w *File) Close() error {
	if w.node != nil {
		w.s.untrack(w)
		w.node = nil
	}
	return w.ioErr("close", w.f.Close())
}

func (w *File) ioErr(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return wrap(op, w.rel, err)
}
