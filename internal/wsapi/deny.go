package wsapi

import (
	"time"

	"github.com/wharf/wharf/internal/server"
)

// CloseJTIs closes the open sockets whose current token carries one of
// jtis and was issued at or before at: the tokens POST
// /api/servers/{s}/ws/deny has just denied (tokens.Denylist.DenyJTIs). It
// returns how many it closed. A socket that re-authenticated with a newer
// token stays open.
func (h *Hub) CloseJTIs(jtis []string, at time.Time) int {
	want := make(map[string]struct{}, len(jtis))
	for _, j := range jtis {
		want[j] = struct{}{}
	}
	h.mu.Lock()
	var matched []*session
	for s := range h.sessions {
		c := s.claims.Load()
		if c == nil {
			continue
		}
		if _, ok := want[c.JTI]; ok && c.IssuedAt.Unix() <= at.Unix() {
			matched = append(matched, s)
		}
	}
	h.mu.Unlock()
	for _, s := range matched {
		s.Close(server.CloseRevoked, "token denied")
	}
	return len(matched)
}
