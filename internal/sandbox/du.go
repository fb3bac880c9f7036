package sandbox

import (
	"context"
	"errors"

	"github.com/wharf/wharf/internal/sandbox/internal/fdwalk"
)

// du returns the disk usage of rel and what lies below it: the allocated
// bytes of every entry (st_blocks), at least one block each (see
// accounting.go), a file with several hard links once, never following a
// symbolic link; the root itself is not counted (fdwalk.Usage: few
// descriptors whatever the depth). A directory that cannot be listed
// (other than one removed or replaced meanwhile) does not stop the count:
// the total of the rest is returned with an error naming the first such
// directory, and the caller must not take the total as complete.
func (s *state) du(ctx context.Context, rel string) (int64, error) {
	return s.sum(ctx, "usage", rel, func(rootfd int) (int64, error) {
		return fdwalk.Usage(ctx, rootfd, rel, blockSize)
	})
}

// countEntries returns the number of entries below rel (rel itself not
// counted), with du's walk: the same bounds on descriptors and depth,
// never following a symbolic link, but reading only the directory
// records. Hard links count once per name. Errors as du's.
func (s *state) countEntries(ctx context.Context, rel string) (int64, error) {
	return s.sum(ctx, "count", rel, func(rootfd int) (int64, error) {
		return fdwalk.Count(ctx, rootfd, rel)
	})
}

// sum runs a sum of fdwalk below the root's descriptor; op names a failure
// to reach that descriptor.
func (s *state) sum(ctx context.Context, op, rel string, run func(rootfd int) (int64, error)) (int64, error) {
	rc, err := s.rootDir.SyscallConn()
	if err != nil {
		return 0, wrap(op, rel, err)
	}
	var total int64
	var serr error
	if err := rc.Control(func(rootfd uintptr) {
		total, serr = sumErr(run(int(rootfd)))
	}); err != nil {
		return 0, wrap(op, rel, err)
	}
	return total, serr
}

// sumErr names a sum's failure as the sandbox does (every sum's failure
// is a "usage" one, as it always was).
func sumErr(total int64, err error) (int64, error) {
	var pe *fdwalk.PathError
	if errors.As(err, &pe) {
		return total, wrap("usage", pe.Rel, pe.Err)
	}
	return total, err
}
