package server

import (
	"errors"

	"github.com/wharf/wharf/internal/usererr"
)

// Errors a user may see: their messages and kinds are what the HTTP,
// websocket and SFTP layers answer.
var (
	ErrInstalling   = usererr.New(usererr.Conflict, "Server is currently installing.")
	ErrTransferring = usererr.New(usererr.Conflict, "Server is currently being transferred.")
	ErrRestoring    = usererr.New(usererr.Conflict, "Server is currently being restored.")
	ErrSuspended    = usererr.New(usererr.Invalid, "Cannot start or restart a server that is suspended.")
	ErrRunning      = usererr.New(usererr.Conflict, "Server is already running.")
	ErrNotRunning   = usererr.New(usererr.NotRunning, "Cannot send commands to a stopped server instance.")
	ErrLocked       = usererr.New(usererr.Conflict, "Another power action is currently being processed for this server, please try again later.")
	ErrNotOnPanel   = usererr.New(usererr.NotFound, "The server does not exist on the backend.")
	ErrDeleted      = usererr.New(usererr.NotFound, "The requested resource does not exist on this instance.")
	ErrBadAction    = usererr.New(usererr.Unprocessable, "the power action provided was not valid, should be one of \"stop\", \"start\", \"restart\", \"kill\"")
	// ErrExists is returned when a server with that UUID is already on this node.
	ErrExists = usererr.New(usererr.Conflict, "Server already exists on this node.")
)

// Errors of background work, reported on the console and in the log only.
var (
	ErrLockTimeout = errors.New("timed out waiting for the power lock")
	ErrDiskSpace   = errors.New("server is out of disk space")
)
