package sandbox

import (
	"strings"

	"golang.org/x/sys/unix"
)

// resolveWalk finds the same name as resolveInRoot, but holds the directory
// reached so far open: each component costs one fstatat relative to it (and
// an openat to go down), instead of an Lstat walked again from the root, so
// the cost is linear in the depth rather than quadratic. After a ".." from
// a link's target the directory is reopened from the root, once, before
// the next component (the names reached are real directories, never links).
func (s *state) resolveWalk(rel string) (string, bool) {
	if rel == "." {
		return ".", true
	}
	w := resolver{s: s, fd: -1}
	defer w.close()
	todo := strings.Split(rel, "/")
	var done []string
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", false
			}
			done = done[:len(done)-1]
			w.close() // reopened from the root when next needed
			continue
		}
		if !w.open(done) {
			return joinRest(done, c, todo), true // as a failed Lstat: literally
		}
		var st unix.Stat_t
		if err := unix.Fstatat(w.fd, c, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			// Missing (or unreadable): the rest is taken literally.
			return joinRest(done, c, todo), true
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			hops++
			if hops > 40 {
				return "", false
			}
			target, err := readlinkat(w.fd, c)
			if err != nil || strings.HasPrefix(target, "/") {
				return "", false
			}
			todo = append(strings.Split(target, "/"), todo...)
		case unix.S_IFDIR:
			if len(todo) > 0 && !w.down(c) {
				return joinRest(done, c, todo), true // as a failed Lstat: literally
			}
			done = append(done, c)
		default:
			// Not a directory: whatever follows cannot be found below it.
			return joinRest(done, c, todo), true
		}
	}
	if len(done) == 0 {
		return ".", true
	}
	return strings.Join(done, "/"), true
}

func joinRest(done []string, c string, todo []string) string {
	out := make([]string, 0, len(done)+1+len(todo))
	out = append(append(append(out, done...), c), todo...)
	return strings.Join(out, "/")
}

// resolver holds the descriptor of the directory a resolveWalk has reached
// (-1 when it must be opened again from the root).
type resolver struct {
	s  *state
	fd int
}

func (w *resolver) close() {
	if w.fd >= 0 {
		_ = unix.Close(w.fd)
		w.fd = -1
	}
}

// open makes sure fd is the directory done (real directories only),
// walking down from the root when it is not open.
func (w *resolver) open(done []string) bool {
	if w.fd >= 0 {
		return true
	}
	rc, err := w.s.rootDir.SyscallConn()
	if err != nil {
		return false
	}
	var oerr error
	if err := rc.Control(func(root uintptr) {
		w.fd, oerr = unix.Openat(int(root), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}); err != nil || oerr != nil {
		w.fd = -1
		return false
	}
	for _, c := range done {
		if !w.down(c) {
			return false
		}
	}
	return true
}

// down replaces fd with its entry c, a directory (never through a link).
func (w *resolver) down(c string) bool {
	next, err := unix.Openat(w.fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	w.close()
	if err != nil {
		return false
	}
	w.fd = next
	return true
}

// readlinkat reads the target of the link name in dirfd, whatever its
// length.
func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
