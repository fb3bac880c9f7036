// Package deeptree makes directory chains deeper than a host path can name,
// as a game process can. It imports nothing of the module, so that the
// sandbox's own tests can use it.
package deeptree

import (
	"os"

	"golang.org/x/sys/unix"
)

// Chain makes depth nested directories "d" below root, as a game
// process can: each one made and opened relative to the one above it, so
// the chain may go deeper than any host path (PATH_MAX) can name. It
// returns the deepest directory, open; the caller closes it.
func Chain(root string, depth int) (*os.File, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	for range depth {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			unix.Close(fd)
			return nil, err
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return nil, err
		}
		fd = next
	}
	return os.NewFile(uintptr(fd), "deepest"), nil
}

// ChainWithFile is Chain with a file "big" holding size zero bytes at
// the bottom.
func ChainWithFile(root string, depth, size int) error {
	dir, err := Chain(root, depth)
	if err != nil {
		return err
	}
	defer dir.Close()
	fd, err := unix.Openat(int(dir.Fd()), "big", unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, make([]byte, size))
	return err
}
