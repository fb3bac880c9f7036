package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"syscall"

	"github.com/wharf/wharf/internal/sandbox/internal/fdwalk"
	"github.com/wharf/wharf/internal/usererr"
)

// sentinel is an error value that can also answer errors.Is for a standard
// library error (ErrNotExist is also fs.ErrNotExist, and so on), and that
// carries what the user is told when it reaches them (nil: an internal error).
type sentinel struct {
	msg  string
	also error
	user *usererr.Error
}

func (e *sentinel) Error() string { return e.msg }

func (e *sentinel) Is(target error) bool { return e.also != nil && target == e.also }

// Unwrap gives the user-visible error, when there is one.
func (e *sentinel) Unwrap() error {
	if e.user == nil {
		return nil
	}
	return e.user
}

// notFound is the one answer for a missing file and for a path outside the
// root, so that nothing outside the root is ever revealed.
var notFound = usererr.New(usererr.NotFound, "The requested file does not exist.")

// Errors returned by the sandbox. Every error returned by an FS method is an
// *Error that wraps one of these (or a syscall.Errno when none applies), so
// errors.Is works on them. Those a user may see carry a usererr message:
// ErrOutsideRoot and ErrNotExist should both answer 404 so that the existence
// of anything outside the root is never revealed.
var (
	// ErrOutsideRoot: the name, or a symbolic link on its way, leads out of
	// the root (".." above the root, an absolute link, a link chain ending
	// outside, a symlink loop, a NUL byte).
	ErrOutsideRoot error = &sentinel{msg: "path resolves outside the server root", user: notFound}
	// ErrNotExist: no such file inside the root. errors.Is(err, fs.ErrNotExist) is true too.
	ErrNotExist error = &sentinel{msg: "file does not exist", also: fs.ErrNotExist, user: notFound}
	// ErrExist: the target already exists. errors.Is(err, fs.ErrExist) is true too.
	ErrExist error = &sentinel{msg: "file already exists", also: fs.ErrExist,
		user: usererr.New(usererr.Conflict, "The destination already exists.")}
	// ErrIsDir: a file operation named a directory.
	ErrIsDir error = &sentinel{msg: "is a directory",
		user: usererr.New(usererr.Invalid, "Cannot perform that action: file is a directory.")}
	// ErrNotDir: a directory operation named something else, or a path
	// component that is not a directory.
	ErrNotDir error = &sentinel{msg: "not a directory",
		user: usererr.New(usererr.Invalid, "Cannot perform that action: a part of the path is not a directory.")}
	// ErrDenied: the name (or what it resolves to) matches the egg's file
	// denylist. errors.Is(err, fs.ErrPermission) is true too.
	ErrDenied error = &sentinel{msg: "file is on the server's denylist", also: fs.ErrPermission,
		user: usererr.New(usererr.Forbidden, "This file cannot be modified: present in egg denylist.")}
	// ErrNoSpace: the operation would exceed the server's disk limit, or the
	// limit is -1 (no writes at all).
	ErrNoSpace error = &sentinel{msg: "server disk space limit reached",
		user: usererr.New(usererr.Invalid, "There is not enough disk space available to perform that action.")}
	// ErrTooLarge: ReadFile found more bytes than its limit.
	ErrTooLarge error = &sentinel{msg: "file is larger than the allowed size",
		user: usererr.New(usererr.Invalid, "The file is too large for this action.")}
	// ErrInvalid: an operation that is not allowed on this name (removing or
	// renaming the root itself, for example). errors.Is(err, fs.ErrInvalid) is true too.
	ErrInvalid error = &sentinel{msg: "invalid operation on this path", also: fs.ErrInvalid}
	// ErrNotRegular: a write open named a FIFO, socket or device (what a
	// game process can make in its directory), refused rather than opened
	// for writing.
	ErrNotRegular error = &sentinel{msg: "not a regular file",
		user: usererr.New(usererr.Invalid, "Cannot perform that action: not a regular file.")}
	// ErrClosed: the FS was closed. errors.Is(err, fs.ErrClosed) is true too.
	ErrClosed error = &sentinel{msg: "sandbox is closed", also: fs.ErrClosed}
	// ErrPathTooLong: the name is longer than MaxPathLen bytes.
	ErrPathTooLong error = &sentinel{msg: "path too long",
		user: usererr.New(usererr.Invalid, "Path too long: at most "+strconv.Itoa(MaxPathLen)+" bytes.")}
	// ErrPathTooDeep: the name has more than MaxPathDepth components.
	ErrPathTooDeep error = &sentinel{msg: "path too deep",
		user: usererr.New(usererr.Invalid, "Path too deep: at most "+strconv.Itoa(MaxPathDepth)+" directories.")}
	// ErrNameTooLong: a component of the name is longer than MaxNameLen
	// bytes; also the kernel's ENAMETOOLONG, wherever it comes back.
	ErrNameTooLong error = &sentinel{msg: "file name too long",
		user: usererr.New(usererr.Invalid, "File name too long: at most "+strconv.Itoa(MaxNameLen)+" bytes.")}
)

// IsPathLimit reports whether err is the refusal of a name beyond one of
// the path limits (ErrPathTooLong, ErrPathTooDeep, ErrNameTooLong).
func IsPathLimit(err error) bool {
	return errors.Is(err, ErrPathTooLong) || errors.Is(err, ErrPathTooDeep) || errors.Is(err, ErrNameTooLong)
}

// Error describes a failed sandbox operation. Path is the name relative to
// the server root, always written with a leading "/" (the way the panel
// writes it); it never contains a host path. Kind is one of the sentinel
// errors above, or nil; Errno is the system error underneath, when there is one.
type Error struct {
	Op    string
	Path  string
	Kind  error
	Errno syscall.Errno
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteByte(' ')
	b.WriteString(e.Path)
	b.WriteString(": ")
	switch {
	case e.Kind != nil:
		b.WriteString(e.Kind.Error())
	case e.Errno != 0:
		b.WriteString(e.Errno.Error())
	default:
		b.WriteString("operation failed")
	}
	return b.String()
}

// Unwrap gives errors.Is and errors.As the kind and the errno.
func (e *Error) Unwrap() []error {
	out := make([]error, 0, 2)
	if e.Kind != nil {
		out = append(out, e.Kind)
	}
	if e.Errno != 0 {
		out = append(out, e.Errno)
	}
	return out
}

// display writes a cleaned relative name the way error messages show it.
func display(rel string) string {
	if rel == "." || rel == "" {
		return "/"
	}
	return "/" + rel
}

func newErr(op, rel string, kind error) error {
	return &Error{Op: op, Path: display(rel), Kind: kind}
}

// wrap converts an error from os.Root or a system call into an *Error that
// names only the relative path. The original error is dropped (its text may
// hold a host path); only its kind and errno survive.
func wrap(op, rel string, err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err // the caller is gone: kept as it is (a copy loop stopped)
	}
	e := &Error{Op: op, Path: display(rel)}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		e.Errno = errno
	}
	switch {
	case errors.Is(err, ErrNoSpace), errno == syscall.ENOSPC, errno == syscall.EDQUOT:
		e.Kind = ErrNoSpace
	case errors.Is(err, ErrDenied):
		e.Kind = ErrDenied
	case errors.Is(err, ErrTooLarge):
		e.Kind = ErrTooLarge
	case errno == syscall.ENAMETOOLONG:
		e.Kind = ErrNameTooLong
	case errors.Is(err, ErrOutsideRoot), isEscape(err), errno == syscall.ELOOP, errno == syscall.EXDEV,
		errors.Is(err, fdwalk.ErrSwapped):
		// ELOOP: a symlink loop, or O_NOFOLLOW met a symlink. EXDEV: os.Root
		// refusing to cross out of the tree. Both are "bad path". A walked
		// directory swapped after its listing is one too (as it always was).
		e.Kind = ErrOutsideRoot
	case errors.Is(err, fs.ErrNotExist):
		e.Kind = ErrNotExist
	case errors.Is(err, fs.ErrExist), errno == syscall.ENOTEMPTY:
		e.Kind = ErrExist
	case errno == syscall.EISDIR:
		e.Kind = ErrIsDir
	case errno == syscall.ENOTDIR:
		e.Kind = ErrNotDir
	case errors.Is(err, fs.ErrClosed):
		e.Kind = ErrClosed
	case errors.Is(err, fs.ErrInvalid), errno == syscall.EINVAL:
		e.Kind = ErrInvalid
	}
	return e
}

// isEscape recognises os.Root's "path escapes from parent" error, which the
// standard library does not export.
func isEscape(err error) bool {
	for err != nil {
		if err.Error() == "path escapes from parent" {
			return true
		}
		err = errors.Unwrap(err)
	}
	return false
}
