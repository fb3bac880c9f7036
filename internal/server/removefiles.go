package server

import (
	"context"
	"errors"
	"io/fs"
	"os"
)

// removeFiles deletes a deleted server's files once its jobs have ended
// (Manager.Delete): the tree through the sandbox (trusted: the denylist
// does not keep a file of a deleted server), then the sandbox is closed
// and its root, empty now, removed: a directory the daemon named, never a
// path a user influenced.
func (s *Server) removeFiles(ctx context.Context) error {
	root := s.files.Root()
	err := s.files.Trusted().RemoveAll(ctx, ".")
	if cerr := s.files.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Remove(root); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
