package server

import "sync"

// Session is an open connection of a user to a server (a websocket, later an
// SFTP session) that the server can close: on suspension, deletion, or when
// the backend deauthorizes the user.
type Session interface {
	User() string
	Close(code int, reason string)
}

// Close codes used for websocket sessions.
const (
	// 1000, not Pelican's 4409: the panel's console reconnects every
	// second after any close but 1000, 1001 and 1005.
	CloseSuspended = 1000
	CloseDeleted   = 1001
	CloseRevoked   = 4401
)

type sessions struct {
	mu  sync.Mutex
	set map[Session]struct{}
}

// AddSession registers a session; call the returned function when it ends.
func (s *Server) AddSession(sess Session) (remove func()) {
	s.sessions.mu.Lock()
	if s.sessions.set == nil {
		s.sessions.set = map[Session]struct{}{}
	}
	s.sessions.set[sess] = struct{}{}
	s.sessions.mu.Unlock()
	return func() {
		s.sessions.mu.Lock()
		delete(s.sessions.set, sess)
		s.sessions.mu.Unlock()
	}
}

// CloseSessions closes every session whose user matches (all when user is empty).
func (s *Server) CloseSessions(user string, code int, reason string) {
	s.sessions.mu.Lock()
	var matched []Session
	for sess := range s.sessions.set {
		if user == "" || sess.User() == user {
			matched = append(matched, sess)
		}
	}
	s.sessions.mu.Unlock()
	for _, sess := range matched {
		sess.Close(code, reason)
	}
}
