package sandbox

import (
	"errors"
	"strconv"
	"strings"

	"github.com/wharf/wharf/internal/sandbox/internal/fdwalk"
	"github.com/wharf/wharf/internal/usererr"
)

// Vanished reports whether a walk error only says that an entry went away
// while the tree was walked: it was removed (ErrNotExist), or replaced by
// a link or by something that is not a directory (ErrOutsideRoot,
// ErrNotDir; links are never followed). A live server changes its files
// during a backup; such an entry is no longer there to be archived, and
// callers leave it out. Every other error (EMFILE, EACCES, EIO, a
// directory that cannot be listed) means a part of the tree could not be
// read: callers fail with it rather than return a partial result.
func Vanished(err error) bool {
	return errors.Is(err, ErrNotExist) || errors.Is(err, ErrOutsideRoot) || errors.Is(err, ErrNotDir)
}

// ShortPath shortens the path in a message for a person (a walk can meet
// names thousands of components deep): its start and its end stay.
func ShortPath(p string) string {
	const keep = 120
	if len(p) <= 2*keep+20 {
		return p
	}
	return p[:keep] + " … (" + strconv.Itoa(strings.Count(p, "/")) + " components) … " + p[len(p)-keep:]
}

// Errors of walks (see Walk).
var (
	// ErrWalkMoved: a directory the walk had left to save descriptors was
	// moved or removed before the walk could come back to it.
	ErrWalkMoved error = &sentinel{msg: "a directory moved while it was walked",
		user: usererr.New(usererr.Conflict, "The files changed while they were being read: try again.")}
	// ErrUncheckable: a walked file that a denylist applies to, whose name
	// the kernel cannot give (longer than PATH_MAX), so that it cannot be
	// checked against the denylist.
	ErrUncheckable error = &sentinel{msg: "file lies too deep to be checked against the denylist",
		user: usererr.New(usererr.Invalid, "A file lies too deep in the tree to be checked against the egg's denylist.")}
)

// deniedDir reports whether the directory l of a walk, at rel, or one of
// its ancestors matches the denylist dl, computed once per directory (the
// walk never changes dl midway: a denylist replaced during a walk applies
// from the next one), kept in the level's Memo: 0 not known yet, 1 no,
// 2 yes. Concurrent callers may compute it twice, the same.
func deniedDir(l *fdwalk.Level, dl *denylist, rel string) bool {
	switch l.Memo.Load() {
	case 1:
		return false
	case 2:
		return true
	}
	var v bool
	switch {
	case rel == "." || rel == "":
	case l.Up() == nil:
		v = dl.match(rel) // where the walk starts: every prefix, once
	default:
		up, _ := split(rel)
		v = deniedDir(l.Up(), dl, up) || dl.m.Match(strings.Split(rel, "/"), true)
	}
	if v {
		l.Memo.Store(2)
	} else {
		l.Memo.Store(1)
	}
	return v
}
