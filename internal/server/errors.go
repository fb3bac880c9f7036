package server

import "errors"

// Errors the HTTP and websocket layers map to answers.
var (
	ErrInstalling   = errors.New("server is currently installing")
	ErrTransferring = errors.New("server is currently being transferred")
	ErrRestoring    = errors.New("server is currently being restored")
	ErrSuspended    = errors.New("server is suspended")
	ErrRunning      = errors.New("server is already running")
	ErrNotRunning   = errors.New("server is not running")
	ErrLocked       = errors.New("another power action is currently being processed for this server, please try again later")
	ErrLockTimeout  = errors.New("timed out waiting for the power lock")
	ErrDiskSpace    = errors.New("server is out of disk space")
	ErrNotOnPanel   = errors.New("server does not exist on the backend")
	ErrDeleted      = errors.New("server has been deleted")
	ErrBadAction    = errors.New("the power action provided was not valid, should be one of \"stop\", \"start\", \"restart\", \"kill\"")
)
