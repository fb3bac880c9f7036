package chunkstore

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// missingIfNotDir reports a name below an existing object ("a/b" where "a"
// is a file) as missing, as a bucket does: there is no such object.
func missingIfNotDir(err error) error {
	if errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	}
	return err
}
