// Package deauth takes a user's access away from servers: the user's
// websocket tokens issued until now are refused, and the user's open sessions
// (websocket consoles, and any other session registered with the server) are
// closed. Other users stay connected.
package deauth

import (
	"strings"
	"time"

	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/tokens"
	"github.com/wharf/wharf/internal/usererr"
)

// ErrNoUser: the request names no user (400).
var ErrNoUser = usererr.New(usererr.Invalid, "The user field is required.")

// Service deauthorizes users.
type Service struct {
	Denylist *tokens.Denylist
	Servers  *server.Manager
	// Now is the clock of the denial (time.Now when nil).
	Now func() time.Time
}

// Deauthorize refuses the user's tokens issued until now on the listed
// servers (every server when the list is empty) and closes the user's
// sessions there, through server.Server.CloseSessions, the one path every
// kind of session is registered with.
func (d *Service) Deauthorize(user string, servers []string) error {
	if user == "" {
		return ErrNoUser
	}
	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	ids := make([]string, 0, len(servers))
	for _, id := range servers {
		ids = append(ids, strings.ToLower(id))
	}
	d.Denylist.Deny(user, ids, now())

	var targets []*server.Server
	if len(ids) == 0 {
		targets = d.Servers.All()
	} else {
		for _, id := range ids {
			if s, ok := d.Servers.Get(id); ok {
				targets = append(targets, s)
			}
		}
	}
	for _, s := range targets {
		s.CloseSessions(user, server.CloseRevoked, "user deauthorized")
	}
	return nil
}
