// Package quota puts each server directory in a kernel project quota
// (ext4 or XFS mounted with project quotas), so that the filesystem itself
// refuses writes past the server's disk limit, the game's own included:
// Pelican Wings' system.quotas.
//
// A server directory gets a project id of its own, kept on the directory's
// inode (FS_IOC_FSSETXATTR), with the inherit flag that gives every entry
// created below it the same id. Entries that existed before are given it
// once, by a walk that never follows links. The project's block hard limit
// is the server's disk limit.
package quota

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/sandbox"
)

// ErrUnsupported is returned by Open when the data directory's filesystem
// does not enforce project quotas.
var ErrUnsupported = errors.New("project quotas are not available")

// Quotas sets project quotas on the server directories of one data
// directory.
type Quotas struct {
	data *os.File   // the data directory: quota commands name its filesystem
	mu   sync.Mutex // one project id chosen at a time
}

// Open checks that the filesystem of the data directory enforces project
// quotas; the error says why not (wrapping ErrUnsupported).
func Open(dataDir string) (*Quotas, error) {
	d, err := os.Open(dataDir)
	if err != nil {
		return nil, err
	}
	if err := checkSupport(int(d.Fd())); err != nil {
		d.Close()
		return nil, fmt.Errorf("%w on %s: %v", ErrUnsupported, dataDir, err)
	}
	return &Quotas{data: d}, nil
}

func checkSupport(fd int) error {
	if _, err := getxattr(fd); err != nil {
		return fmt.Errorf("the filesystem keeps no project ids (%v)", err)
	}
	enforced, err := projectLimitsEnforced(fd)
	switch {
	case errors.Is(err, unix.ENOSYS):
		return errors.New("no quota support in the kernel or the filesystem (quotactl_fd: ENOSYS; Linux 5.14 or newer is needed)")
	case errors.Is(err, unix.EPERM):
		return errors.New("changing quotas needs root")
	case err != nil:
		return fmt.Errorf("the filesystem does not account project quotas (%v); mount it with prjquota", err)
	case !enforced:
		return errors.New("project quotas are accounted but not enforced; mount the filesystem with prjquota")
	}
	return nil
}

// Close releases the data directory.
func (q *Quotas) Close() error { return q.data.Close() }

// Apply puts the tree of files (a server directory on the data
// directory's filesystem) in a project of its own, chosen from key (the
// server's uuid) the first time, and sets the project's hard limit to
// limit bytes: 0 is unlimited, and -1 (no writes) is one block, less than
// the directory itself holds.
// The root is reached through the sandbox (ControlRoot), never opened by
// its host path.
func (q *Quotas) Apply(ctx context.Context, files *sandbox.FS, key string, limit int64) error {
	return files.ControlRoot(func(fd int) error { return q.apply(ctx, files, fd, key, limit) })
}

// apply is Apply on fd, the descriptor of the tree's root.
func (q *Quotas) apply(ctx context.Context, files *sandbox.FS, fd int, key string, limit int64) error {
	id, fresh, err := q.assign(fd, key)
	if err != nil {
		return fmt.Errorf("quota: project of %s: %w", key, err)
	}
	if fresh {
		if err := tagTree(ctx, files.Trusted(), id); err != nil {
			return fmt.Errorf("quota: project of %s: %w", key, err)
		}
	}
	if err := setProjectLimits(fd, id, limitBlocks(limit)); err != nil {
		return fmt.Errorf("quota: limit of %s: %w", key, err)
	}
	return nil
}

// Remove lifts the limit of the project the directory dir is in (before
// the server's files are deleted); a directory that is gone or in no
// project is not an error.
func (q *Quotas) Remove(dir string) error {
	d, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	a, err := getxattr(int(d.Fd()))
	if err != nil || a.projid == 0 {
		return err
	}
	return setProjectLimits(int(d.Fd()), a.projid, 0)
}

func limitBlocks(limit int64) uint64 {
	switch {
	case limit == 0:
		return 0
	case limit < 0:
		return 1
	}
	return uint64((limit + blockSize - 1) / blockSize)
}

// assign gives the directory fd a project id and the inherit flag, when it
// has not both yet (fresh is then true: its entries need the id too). An
// id the directory already carries is kept unless the data directory
// carries it too (then it was inherited from there, and is shared).
func (q *Quotas) assign(fd int, key string) (id uint32, fresh bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	a, err := getxattr(fd)
	if err != nil {
		return 0, false, err
	}
	parent, err := getxattr(int(q.data.Fd()))
	if err != nil {
		return 0, false, err
	}
	if a.projid != 0 && a.projid != parent.projid {
		if a.xflags&fsXflagProjinherit != 0 {
			return a.projid, false, nil
		}
		a.xflags |= fsXflagProjinherit
		return a.projid, true, setxattr(fd, a)
	}
	id, err = q.freeProject(key)
	if err != nil {
		return 0, false, err
	}
	a.projid = id
	a.xflags |= fsXflagProjinherit
	return id, true, setxattr(fd, a)
}

// Project ids are taken from [firstID, firstID+idSpan): above the small
// ids administrators give by hand in /etc/projid.
const (
	firstID  = 1 << 20
	idSpan   = 1<<31 - firstID
	maxProbe = 1024
)

// freeProject derives an id from key and, when a project of that id holds
// files already (another server's), takes the next one.
func (q *Quotas) freeProject(key string) (uint32, error) {
	h := fnv.New32a()
	h.Write([]byte(key))
	start := h.Sum32() % idSpan
	for i := uint32(0); i < maxProbe; i++ {
		id := firstID + (start+i)%idSpan
		dq, err := getProjectQuota(int(q.data.Fd()), id)
		if err != nil {
			return 0, err
		}
		if dq.curinodes == 0 {
			return id, nil
		}
	}
	return 0, errors.New("no free project id")
}

// tagTree gives every directory and regular file of files the project id
// (directories also the inherit flag). Links, FIFOs, sockets and devices
// hold no blocks of their own worth counting and are not opened.
func tagTree(ctx context.Context, files *sandbox.FS, id uint32) error {
	return files.WalkContext(ctx, ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			if sandbox.Vanished(err) {
				return nil
			}
			return err
		}
		if rel == "." || !(d.IsDir() || d.Type().IsRegular()) {
			return nil
		}
		err = files.ControlEntry(rel, d, func(fd int) error { return tag(fd, id, d.IsDir()) })
		if sandbox.Vanished(err) {
			return nil
		}
		return err
	})
}

func tag(fd int, id uint32, dir bool) error {
	a, err := getxattr(fd)
	if err != nil {
		return err
	}
	want := a.xflags
	if dir {
		want |= fsXflagProjinherit
	}
	if a.projid == id && a.xflags == want {
		return nil
	}
	a.projid, a.xflags = id, want
	return setxattr(fd, a)
}

// Available reports whether the filesystem of dataDir enforces project
// quotas (what Open checks) without keeping anything open; the error says
// why not (wrapping ErrUnsupported).
func Available(dataDir string) error {
	q, err := Open(dataDir)
	if err != nil {
		return err
	}
	return q.Close()
}

// ProjectOf returns the project id the directory dir carries (0: none).
func ProjectOf(dir string) (uint32, error) {
	d, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	a, err := getxattr(int(d.Fd()))
	if err != nil {
		return 0, err
	}
	return a.projid, nil
}
