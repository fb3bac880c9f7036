// Package tokens verifies the JWTs the panel mints for end users
// (websocket, file download, backup download, file upload, transfer),
// remembers one-time ids, and keeps the websocket denylist.
//
// Rules (shared/COMPAT.md "Tokens"): HS256 keyed with the node token and
// nothing else; exp always required and checked with no leeway; nbf
// checked with a 60 s leeway for clock skew; iss and aud not checked; a
// scope claim, when present, must name the endpoint's purpose; without it
// the purpose follows from the claims, unless api.require_token_scope
// refuses such tokens; an endpoint refuses a token of any
// other purpose even when the claims it needs are there.
package tokens

import "github.com/wharf/wharf/internal/usererr"

// ErrInvalidToken is in the chain of every error of this package
// (errors.Is(err, ErrInvalidToken)): the user is told only that the token
// was refused (401), never which check failed. No message ever contains the
// token.
var ErrInvalidToken = usererr.New(usererr.Unauthorized, "The signed token is invalid, expired, or was already used.")

type tokenError struct{ msg string }

func (e *tokenError) Error() string { return e.msg }
func (e *tokenError) Unwrap() error { return ErrInvalidToken }

// The reasons a token is refused.
var (
	ErrMalformed    error = &tokenError{"token is malformed"}
	ErrAlgorithm    error = &tokenError{"token algorithm is not HS256"}
	ErrSignature    error = &tokenError{"token signature is invalid"}
	ErrNoKey        error = &tokenError{"no signing key configured"}
	ErrExpired      error = &tokenError{"token has expired"}
	ErrNotYetValid  error = &tokenError{"token is not valid yet"}
	ErrWrongPurpose error = &tokenError{"token was not issued for this endpoint"}
	ErrNoScope      error = &tokenError{"token has no scope claim and api.require_token_scope is on"}
	ErrMissingClaim error = &tokenError{"token lacks a required claim"}
	ErrBadClaim     error = &tokenError{"token has a claim of the wrong form"}
	ErrUsed         error = &tokenError{"token has already been used"}
	ErrDenied       error = &tokenError{"token has been revoked"}
)

// claimError names the claim concerned, never its value.
type claimError struct {
	kind  error
	claim string
}

func (e *claimError) Error() string { return e.kind.Error() + ": " + e.claim }
func (e *claimError) Unwrap() error { return e.kind }

func claimErr(kind error, claim string) error { return &claimError{kind: kind, claim: claim} }
