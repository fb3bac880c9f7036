package files

import (
	"errors"
	"fmt"
	"strings"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/usererr"
)

// unreadable turns a walk's failure to read a part of the tree (an entry
// it could not open, list or read: the node out of descriptors, an I/O
// error) into an error the user sees, naming the path, so that a compress
// or a search fails whole instead of answering without that part. It is a
// 409, as for a tree that cannot be read as it is now: the user can retry,
// and nothing about their request was wrong. Errors that are already the
// user's, and any other error, pass unchanged.
func unreadable(err error, outcome string) error {
	if err == nil {
		return nil
	}
	var se *sandbox.Error
	if errors.Is(err, sandbox.ErrUncheckable) && errors.As(err, &se) {
		return usererr.Wrap(err, usererr.Invalid, fmt.Sprintf("Cannot check %s against the egg's denylist: it lies too deep in the tree (%d levels): %s",
			sandbox.ShortPath(se.Path), strings.Count(se.Path, "/")-1, outcome))
	}
	if _, ok := usererr.From(err); ok {
		return err
	}
	if !errors.As(err, &se) {
		return err
	}
	switch se.Op {
	case "walk", "open", "read", "readlink":
	default:
		return err
	}
	reason := "it could not be read"
	if se.Errno != 0 {
		reason = se.Errno.Error()
	}
	return usererr.Wrap(err, usererr.Conflict, fmt.Sprintf("Cannot read %s (%s): %s", sandbox.ShortPath(se.Path), reason, outcome))
}
