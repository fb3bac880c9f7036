package server

import "github.com/wharf/wharf/internal/usererr"

// ErrSuspendedFiles refuses a user's change to the files of a suspended server.
var ErrSuspendedFiles = usererr.New(usererr.Conflict, "This server is suspended: its files cannot be changed.")

// CheckFileWrites reports whether a user (file manager, SFTP, upload) may
// change the server's files now: not while it is suspended, and not while an
// exclusive job (install, restore, transfer) rewrites its tree. Reads are
// always allowed; agent-driven writes (restore, transfer) hold the job slot
// instead.
func (s *Server) CheckFileWrites() error {
	if s.IsSuspended() {
		return ErrSuspendedFiles
	}
	if j := s.RunningJob(); j != JobNone {
		return &BusyError{Running: j}
	}
	return nil
}
