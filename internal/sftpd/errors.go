package sftpd

import (
	"errors"
	"io"

	"github.com/pkg/sftp"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/usererr"
)

// statusError is what a handler returns: pkg/sftp sends code (found by
// errors.As through Unwrap) and msg as the SSH_FXP_STATUS of the request.
type statusError struct {
	code error // one of sftp.ErrSSHFx*, or fxQuotaExceeded
	msg  string
}

func (e *statusError) Error() string { return e.msg }
func (e *statusError) Unwrap() error { return e.code }

// fxCode makes a status code of pkg/sftp's unexported code type, for the
// codes it has no variable for.
func fxCode[T ~uint32](like T, code uint32) T { return T(code) }

// fxQuotaExceeded is SSH_FX_QUOTA_EXCEEDED (15, draft-ietf-secsh-filexfer).
var fxQuotaExceeded = fxCode(sftp.ErrSSHFxOk, 15)

var (
	errDenied      = &statusError{sftp.ErrSSHFxPermissionDenied, "Permission denied."}
	errReadOnly    = &statusError{sftp.ErrSSHFxOpUnsupported, "This SFTP server is read-only."}
	errQuota       = &statusError{fxQuotaExceeded, "Quota Exceeded"}
	errNotRegular  = &statusError{sftp.ErrSSHFxFailure, "Not a regular file."}
	errNotDir      = &statusError{sftp.ErrSSHFxFailure, "Not a directory."}
	errIsDir       = &statusError{sftp.ErrSSHFxFailure, "Is a directory."}
	errExists      = &statusError{sftp.ErrSSHFxFailure, "File already exists."}
	errNoSuchFile  = &statusError{sftp.ErrSSHFxNoSuchFile, "No such file."}
	errLinkRefused = &statusError{sftp.ErrSSHFxPermissionDenied, "Symbolic links are not followed here."}
	errBadLink     = &statusError{sftp.ErrSSHFxPermissionDenied, "A link must point inside the server's files."}
	errDeniedFile  = &statusError{sftp.ErrSSHFxPermissionDenied, "This file cannot be accessed: present in the egg's denylist."}
	errFailure     = &statusError{sftp.ErrSSHFxFailure, "Failure."}
)

// toStatus maps a sandbox or server error to an SFTP status. A name that
// leads out of the root is "no such file", as a missing one is, so nothing
// outside is revealed.
func toStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case err == io.EOF:
		return io.EOF
	case errors.Is(err, sandbox.ErrNoSpace):
		return errQuota
	case errors.Is(err, sandbox.ErrNotExist), errors.Is(err, sandbox.ErrOutsideRoot):
		return errNoSuchFile
	case errors.Is(err, sandbox.ErrDenied):
		return errDeniedFile
	case errors.Is(err, sandbox.ErrExist):
		return errExists
	case errors.Is(err, sandbox.ErrIsDir):
		return errIsDir
	case errors.Is(err, sandbox.ErrNotDir):
		return errNotDir
	case sandbox.IsPathLimit(err):
		// The message names the limit ("Path too deep: at most 256 directories.").
		if ue, ok := usererr.From(err); ok {
			return &statusError{sftp.ErrSSHFxFailure, ue.Message}
		}
		return errFailure
	case errors.Is(err, server.ErrBusy), errors.Is(err, server.ErrSuspendedFiles):
		if ue, ok := usererr.From(err); ok {
			return &statusError{sftp.ErrSSHFxPermissionDenied, ue.Message}
		}
		return errDenied
	}
	var se *statusError
	if errors.As(err, &se) {
		return se
	}
	return errFailure
}
