package sandbox

import (
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/wharf/wharf/internal/sandbox/internal/fdwalk"
)

// Disk accounting counts what is really on disk: the blocks the kernel
// allocated to each entry (st_blocks), and never less than one block per
// entry, so that empty files and directories, which cost an inode each,
// cannot be made without limit. A file the FS holds open for writing is
// charged to the limit until its last handle closes, even after it was
// removed or renamed over: its blocks stay allocated until then.
//
// The cached usage is the last walk (du) plus every change the FS made
// since: entries it created or removed (one block or their charge), and
// for files open for writing, the difference between the blocks an fstat
// shows after each write or truncate and what was charged before. A write
// reserves the most it can allocate before it runs (ErrNoSpace when that
// would cross the limit) and settles to the real figure after, so the
// usage can pass the limit by at most one write per concurrent writer.

// blockSize is the least an entry costs against the disk limit: one block
// of the usual 4 KiB filesystems.
const blockSize = 4096

func roundUp(n int64) int64 { return (n + blockSize - 1) &^ (blockSize - 1) }

// entryCharge is what an entry costs against the disk limit: its allocated
// bytes, at least one block.
func entryCharge(st *syscall.Stat_t) int64 {
	return max(st.Blocks*512, blockSize)
}

// writtenCharge is entryCharge for a file written through our handles,
// capped at its size rounded up to blocks: data written with write(2)
// cannot occupy more, and what some filesystems show beyond it (XFS's
// speculative preallocation past the end of a growing file) is given back
// when the file is closed.
func writtenCharge(st *syscall.Stat_t) int64 {
	return max(min(st.Blocks*512, roundUp(st.Size)), blockSize)
}

// openTable is the set of inodes open for writing through an FS's handles:
// how many handles each has and what the usage holds for it.
type openTable struct {
	mu    sync.Mutex
	nodes map[fdwalk.Inode]*openNode
}

type openNode struct {
	key     fdwalk.Inode
	handles map[*File]struct{}
	charged int64 // what the cached usage holds for this inode
	// size and alloc are the file's size and allocated bytes at the last
	// fstat, to size the next write's reservation.
	size, alloc int64
}

// adjust adds delta (positive or negative) to the usage, never below 0 and
// whatever the limit: it records what happened on disk.
func (s *state) adjust(delta int64) {
	for delta != 0 {
		cur := s.used.Load()
		if s.used.CompareAndSwap(cur, max(cur+delta, 0)) {
			return
		}
	}
}

// fstatRaw is fstat through the RawConn a File keeps (one allocation less
// per write than asking the *os.File for it each time).
func fstatRaw(rc syscall.RawConn, st *syscall.Stat_t) error {
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), st) }); err != nil {
		return err
	}
	return serr
}

// track returns a File for file, just opened for writing, registered in
// the open table. created says that the FS has just created it and
// reserved one block for it (reserveEntry).
func (s *state) track(file *os.File, rel string, appendMode, created bool) (*File, error) {
	var st syscall.Stat_t
	rc, err := file.SyscallConn()
	if err == nil {
		err = fstatRaw(rc, &st)
	}
	if err != nil {
		if created {
			s.release(blockSize)
		}
		return nil, err
	}
	w := &File{f: file, s: s, rel: rel, write: true, appendMode: appendMode, rc: rc}
	t := &s.open
	t.mu.Lock()
	defer t.mu.Unlock()
	k := fdwalk.InodeOf(&st)
	n := t.nodes[k]
	if n == nil {
		n = &openNode{key: k, handles: map[*File]struct{}{}, charged: writtenCharge(&st)}
		switch {
		case created:
			s.adjust(n.charged - blockSize)
		case st.Nlink == 0:
			// Removed between the open and now: no walk counts it any more.
			s.adjust(n.charged)
		}
		if t.nodes == nil {
			t.nodes = map[fdwalk.Inode]*openNode{}
		}
		t.nodes[k] = n
	} else if created {
		s.release(blockSize)
	}
	n.size, n.alloc = st.Size, st.Blocks*512
	n.handles[w] = struct{}{}
	w.node = n
	return w, nil
}

// growth is the most a write of n bytes at off can newly allocate: the
// blocks it touches, or only those past the end when the file has no hole.
func (s *state) growth(node *openNode, off, n int64) int64 {
	s.open.mu.Lock()
	size, alloc := node.size, node.alloc
	s.open.mu.Unlock()
	start, end := off&^(blockSize-1), roundUp(off+n)
	if alloc >= roundUp(size) {
		start = max(start, roundUp(size))
	}
	return max(end-start, 0)
}

// endOf is the file's size at the last fstat (where an append lands).
func (s *state) endOf(node *openNode) int64 {
	s.open.mu.Lock()
	defer s.open.mu.Unlock()
	return node.size
}

// settle charges w's inode what an fstat shows now, and gives back the
// reservation made for the operation that just ran. If fstat fails the
// reservation stays (an overcount until the next walk, never an
// undercount).
func (s *state) settle(w *File, reserved int64) {
	t := &s.open
	t.mu.Lock()
	defer t.mu.Unlock()
	var st syscall.Stat_t
	if err := fstatRaw(w.rc, &st); err != nil {
		return
	}
	n := w.node
	c := writtenCharge(&st)
	s.adjust(c - n.charged - reserved)
	n.charged, n.size, n.alloc = c, st.Size, st.Blocks*512
}

// untrack removes w from the open table before it is closed. The last
// handle of a file that has no name left releases the file's charge: its
// blocks are freed by this close.
func (s *state) untrack(w *File) {
	t := &s.open
	t.mu.Lock()
	defer t.mu.Unlock()
	n := w.node
	var st syscall.Stat_t
	err := fstatRaw(w.rc, &st)
	if err == nil {
		c := writtenCharge(&st)
		s.adjust(c - n.charged)
		n.charged = c
	}
	delete(n.handles, w)
	if len(n.handles) > 0 {
		return
	}
	delete(t.nodes, n.key)
	if err == nil && st.Nlink == 0 {
		s.release(n.charged)
	}
}

// unlinkedOpenBytes is what the files open through our handles that have
// no name left occupy: a walk cannot see them, but they are on disk.
func (s *state) unlinkedOpenBytes() int64 {
	t := &s.open
	t.mu.Lock()
	defer t.mu.Unlock()
	var total int64
	for _, n := range t.nodes {
		for w := range n.handles {
			var st syscall.Stat_t
			if fstatRaw(w.rc, &st) == nil && st.Nlink == 0 {
				n.charged = writtenCharge(&st)
				total += n.charged
			}
			break
		}
	}
	return total
}

// unlinkCharged runs remove, which takes away the entry fi describes (an
// unlink, a rmdir or a rename over it), and returns what that frees from
// the usage. It holds the open table so that a handle's last close cannot
// slip between the removal and the check.
func (s *state) unlinkCharged(fi fs.FileInfo, remove func() error) (int64, error) {
	s.open.mu.Lock()
	defer s.open.mu.Unlock()
	if err := remove(); err != nil {
		return 0, err
	}
	return s.freedBy(fi), nil
}

// freedBy is what removing the entry fi frees: its charge, except for a
// regular file that keeps another name (hard links count once), or that
// is still open through our handles (released by the last close). The
// caller holds s.open.mu.
func (s *state) freedBy(fi fs.FileInfo) int64 {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	if fi.Mode().IsRegular() {
		if st.Nlink > 1 {
			return 0
		}
		if _, open := s.open.nodes[fdwalk.InodeOf(st)]; open {
			return 0
		}
	}
	return entryCharge(st)
}

// reserveEntry reserves the one block a new entry costs, or fails with
// ErrNoSpace when that would cross the limit.
func (s *state) reserveEntry() error { return s.reserve(blockSize) }

// mkdirCharged makes the directory rel and charges it one block.
func (s *state) mkdirCharged(rel string, perm fs.FileMode) error {
	if err := s.reserveEntry(); err != nil {
		return err
	}
	err := s.root.Mkdir(rel, perm)
	if err != nil {
		s.release(blockSize)
	}
	return err
}

// symlinkCharged makes the symbolic link rel and charges it one block.
func (s *state) symlinkCharged(target, rel string) error {
	if err := s.reserveEntry(); err != nil {
		return err
	}
	err := s.root.Symlink(target, rel)
	if err != nil {
		s.release(blockSize)
	}
	return err
}

// removeCharged removes the entry rel (best effort: for cleaning up a
// temporary file) and releases what that frees.
func (s *state) removeCharged(rel string) {
	fi, err := s.root.Lstat(rel)
	if err != nil {
		return
	}
	freed, _ := s.unlinkCharged(fi, func() error { return s.root.Remove(rel) })
	s.release(freed)
}
