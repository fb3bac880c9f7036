package fdwalk

import (
	"context"
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"
)

// PathError is a sum's failure at the directory Rel (relative to the
// root the sum was given).
type PathError struct {
	Rel string
	Err error
}

func (e *PathError) Error() string { return e.Rel + ": " + e.Err.Error() }
func (e *PathError) Unwrap() error { return e.Err }

// Usage returns the disk usage of rel below the root rootfd and what lies
// below it: the allocated bytes of every entry (st_blocks), at least
// minSize each, a file with several hard links once, never following a
// symbolic link; the root itself is not counted. It holds few descriptors
// whatever the depth: each directory is listed and closed before its
// subdirectories are opened, by their path from an anchor (the root, or a
// directory kept open once the path from the previous anchor grew long)
// with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS). A directory that
// cannot be listed (other than one removed or replaced meanwhile) does not
// stop the sum: the total of the rest is returned with a *PathError naming
// the first such directory, and the caller must not take the total as
// complete.
func Usage(ctx context.Context, rootfd int, rel string, minSize int64) (int64, error) {
	w := sumWalk{minSize: minSize, seen: map[Inode]struct{}{}, buf: make([]byte, BufSize)}
	return w.run(ctx, rootfd, rel)
}

// Count returns the number of entries below rel (rel itself not
// counted), with Usage's walk: the same bounds on descriptors and depth,
// never following a symbolic link, but reading only the directory
// records. Hard links count once per name. Errors as Usage's.
func Count(ctx context.Context, rootfd int, rel string) (int64, error) {
	w := sumWalk{countOnly: true, buf: make([]byte, BufSize)}
	return w.run(ctx, rootfd, rel)
}

// anchorAfter is how long (in bytes) the path of a directory relative to
// its anchor may grow before the directory is kept open as the anchor of
// its subtree: a child's path (one more component of at most 255 bytes)
// then stays under PATH_MAX.
const anchorAfter = 3000

// sumAnchor is a directory du keeps open while the directories below it,
// opened by their path relative to it, are pending.
type sumAnchor struct {
	fd   int
	rel  string // relative to the root
	refs int    // pending directories that name a path relative to it
	own  bool   // du opened it (the root's descriptor is not du's to close)
}

func (a *sumAnchor) unref() {
	a.refs--
	if a.refs == 0 && a.own {
		_ = unix.Close(a.fd)
	}
}

// sumDir is a directory waiting to be listed.
type sumDir struct {
	anchor *sumAnchor
	path   string // relative to anchor
}

func (d sumDir) rel() string {
	if d.anchor.rel == "." {
		return d.path
	}
	return d.anchor.rel + "/" + d.path
}

// run walks rel (below the root rootfd) and returns the total: bytes, or
// entries for a counting walk.
func (w *sumWalk) run(ctx context.Context, rootfd int, rel string) (int64, error) {
	root := &sumAnchor{fd: rootfd, rel: ".", refs: 1}
	if rel != "." {
		var st unix.Stat_t
		if err := unix.Fstatat(rootfd, rel, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return 0, &PathError{rel, err}
		}
		w.count(&st)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return w.total, nil
		}
	}
	stack := []sumDir{{anchor: root, path: rel}}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if err := ctx.Err(); err != nil {
			d.anchor.unref()
			for _, p := range stack {
				p.anchor.unref()
			}
			return w.total, err
		}
		fd, err := openBeneath(d.anchor.fd, d.path)
		if err != nil {
			w.fail(d.rel(), err)
		} else {
			stack = w.list(fd, d, stack)
		}
		// After the listing: the children it pushed may hold the anchor.
		d.anchor.unref()
	}
	return w.total, w.err
}

// sumWalk is the state of one du, or of one count of entries (countOnly:
// the total is the number of entries, read from the directory records
// alone, without a stat of each).
type sumWalk struct {
	countOnly bool
	minSize   int64 // the least an entry counts for (Usage)
	total     int64
	seen      map[Inode]struct{} // files with several links, counted once
	buf       []byte
	names     []string
	err       error // the first directory that could not be listed
}

func (w *sumWalk) count(st *unix.Stat_t) {
	if w.countOnly {
		w.total++
		return
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1 {
		k := Inode{st.Dev, st.Ino}
		if _, dup := w.seen[k]; dup {
			return
		}
		w.seen[k] = struct{}{}
	}
	w.total += max(st.Blocks*512, w.minSize)
}

// fail records a directory that could not be listed, unless it was
// removed or replaced by something else since its parent was listed.
func (w *sumWalk) fail(rel string, err error) {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return
	}
	if w.err == nil {
		w.err = &PathError{rel, err}
	}
}

// list counts the entries of the directory d (open as fd, which it
// closes, or keeps as an anchor) and pushes its subdirectories.
func (w *sumWalk) list(fd int, d sumDir, stack []sumDir) []sumDir {
	anchor, prefix := d.anchor, d.path+"/"
	if d.path == "." {
		prefix = ""
	}
	var own *sumAnchor
	if len(d.path) > anchorAfter {
		own = &sumAnchor{fd: fd, rel: d.rel(), own: true}
		anchor, prefix = own, ""
	}
	for {
		n, err := unix.ReadDirent(fd, w.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			w.fail(d.rel(), err)
			break
		}
		if n <= 0 {
			break
		}
		if w.countOnly {
			stack = w.countRecords(fd, w.buf[:n], anchor, prefix, stack)
			continue
		}
		_, _, w.names = unix.ParseDirent(w.buf[:n], -1, w.names[:0])
		for _, name := range w.names {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // removed since the listing
			}
			w.count(&st)
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				anchor.refs++
				stack = append(stack, sumDir{anchor: anchor, path: prefix + name})
			}
		}
	}
	if own == nil || own.refs == 0 {
		_ = unix.Close(fd)
	}
	return stack
}

// openBeneath opens the directory path below the directory dirfd without
// following any symbolic link and without leaving dirfd.
func openBeneath(dirfd int, path string) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for range 8 {
		fd, err := unix.Openat2(dirfd, path, &how)
		switch err {
		case nil:
			return fd, nil
		case unix.EINTR, unix.EAGAIN: // EAGAIN: a rename raced the lookup
			continue
		case unix.ENOSYS, unix.EPERM:
			return openEachBeneath(dirfd, path)
		default:
			return -1, err
		}
	}
	return -1, unix.EAGAIN
}

// openEachBeneath is openBeneath for kernels without openat2 (before
// 5.6): one openat per component, each with O_NOFOLLOW.
func openEachBeneath(dirfd int, path string) (int, error) {
	fd := dirfd
	for path != "" {
		name := path
		rest := ""
		for i := 0; i < len(path); i++ {
			if path[i] == '/' {
				name, rest = path[:i], path[i+1:]
				break
			}
		}
		path = rest
		if name == ".." {
			if fd != dirfd {
				_ = unix.Close(fd)
			}
			return -1, unix.EXDEV
		}
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if fd != dirfd {
			_ = unix.Close(fd)
		}
		if err != nil {
			return -1, err
		}
		fd = next
	}
	if fd == dirfd {
		return unix.Dup(dirfd)
	}
	return fd, nil
}

// countRecords counts the entries of one getdents64 buffer of the
// directory fd (parseDirent) and pushes its subdirectories: d_type says
// which they are; only an entry of unknown type (filesystems that do not
// fill it) costs a stat.
func (w *sumWalk) countRecords(fd int, buf []byte, anchor *sumAnchor, prefix string, stack []sumDir) []sumDir {
	for {
		name, typ, n, ok := ParseDirent(buf)
		if !ok {
			return stack
		}
		deleted := binary.NativeEndian.Uint64(buf) == 0 // d_ino
		buf = buf[n:]
		if deleted || string(name) == "." || string(name) == ".." {
			continue
		}
		if typ == unix.DT_UNKNOWN {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, string(name), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // removed since the listing
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				typ = unix.DT_DIR
			}
		}
		w.total++
		if typ == unix.DT_DIR {
			anchor.refs++
			stack = append(stack, sumDir{anchor: anchor, path: prefix + string(name)})
		}
	}
}
