package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// mkdirDown creates the missing directories of rel (cleaned, not ".")
// walking down from the root with one directory descriptor held, so that
// each component costs a mkdirat and an openat relative to its parent:
// linear in the depth, where a call through the root per prefix would walk
// every prefix again from the root (quadratic). A component that is a
// symbolic link is opened through the root instead, which follows in-root
// links and refuses those that lead out, exactly as os.Root does; anything
// else that is not a directory is ENOTDIR. New directories get mode perm
// and the configured owner, set on the opened descriptor.
func (s *state) mkdirDown(rel string, perm fs.FileMode) error {
	cur, err := s.root.OpenFile(".", os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer func() { _ = cur.Close() }()
	parts := strings.Split(rel, "/")
	for i, c := range parts {
		next, created, err := s.mkdirStep(cur, c, perm)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			// A link (or not a directory): let the root decide, following
			// in-root links only.
			next, created = nil, false
			next, err = s.root.OpenFile(strings.Join(parts[:i+1], "/"), os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
		}
		if err != nil {
			return err
		}
		if created {
			if !umaskKept(perm) {
				_ = next.Chmod(perm) // the umask may have removed bits
			}
			s.fchown(next)
		}
		_ = cur.Close()
		cur = next
	}
	return nil
}

// mkdirStep creates the directory name in dir when missing and opens it
// (never through a symbolic link: ELOOP or ENOTDIR then).
func (s *state) mkdirStep(dir *os.File, name string, perm fs.FileMode) (next *os.File, created bool, err error) {
	rc, err := dir.SyscallConn()
	if err != nil {
		return nil, false, err
	}
	fd := -1
	var oerr error
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	cerr := rc.Control(func(dfd uintptr) {
		// An existing directory costs nothing: a server at its disk limit
		// can still reach it. A new one is charged its block first.
		fd, oerr = unix.Openat(int(dfd), name, flags, 0)
		if !errors.Is(oerr, unix.ENOENT) {
			return
		}
		if oerr = s.reserveEntry(); oerr != nil {
			return
		}
		merr := unix.Mkdirat(int(dfd), name, uint32(perm))
		if merr != nil {
			s.release(blockSize)
			if !errors.Is(merr, unix.EEXIST) {
				oerr = merr
				return
			}
		}
		created = merr == nil
		fd, oerr = unix.Openat(int(dfd), name, flags, 0)
	})
	if cerr != nil {
		return nil, false, cerr
	}
	if oerr != nil {
		return nil, false, oerr
	}
	return os.NewFile(uintptr(fd), name), created, nil
}
