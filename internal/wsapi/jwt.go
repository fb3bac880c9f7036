package wsapi

import (
	"errors"

	"github.com/wharf/wharf/internal/tokens"
)

// The panel's console fetches a new token after a `jwt error` only when
// its text contains one of these (shared/COMPAT.md, Websocket); any other
// text leaves the user a "please refresh the page" notice.
const (
	jwtExpiredText = "jwt: exp claim is invalid"
	jwtDeniedText  = "jwt: created too far in past (denylist)"
)

// jwtErrorText is the argument of the `jwt error` answering a refused
// token: the panel's wording first for the two causes it recovers from,
// then ours.
func jwtErrorText(err error) string {
	switch {
	case errors.Is(err, tokens.ErrExpired):
		return jwtExpiredText + ": " + err.Error()
	case errors.Is(err, tokens.ErrDenied):
		return jwtDeniedText + ": " + err.Error()
	}
	return err.Error()
}
