// Package usererr marks the errors whose message may be shown to the person
// who caused them (the panel shows it to its user), and says what kind of
// mistake it was. Domain packages declare these errors; the HTTP, websocket
// and SFTP layers translate the kind into their own status codes in one place
// each, and log the whole chain (the cause) without showing it.
//
// An error that carries no *Error anywhere in its chain is not the user's
// business: it is answered with a generic message and logged.
package usererr

import "errors"

// Kind is what sort of mistake an error is, independent of the protocol.
type Kind int

// The kinds. Their HTTP statuses are in httpapi's error mapping.
const (
	// Invalid: the request itself is wrong (400).
	Invalid Kind = iota + 1
	// Unauthorized: a credential is missing, invalid, expired or used (401).
	Unauthorized
	// Forbidden: a valid caller may not do this (403).
	Forbidden
	// NotFound: the thing named does not exist (404).
	NotFound
	// Conflict: the thing is busy or in a state that refuses this now (409).
	Conflict
	// TooLarge: a body or file is larger than allowed (413).
	TooLarge
	// Unprocessable: the request parsed but a field is invalid (422).
	Unprocessable
	// NotRunning: the action needs a running server process (502, as the
	// panels expect for commands sent to a stopped server).
	NotRunning
	// TooMany: the caller has too many of these running; later (429).
	TooMany
	// Busy: the node has too many of these running; later (503).
	Busy
)

// Error is an error whose Message may be shown to the user as it is.
type Error struct {
	Kind Kind
	// Message is the text shown to the user: a sentence, as the panels
	// display it.
	Message string
	// Err is the cause, kept for the log; it is never shown.
	Err error
}

// New returns a user-visible error without a cause, for use as a sentinel
// that domain code wraps with fmt.Errorf("...: %w", ErrX).
func New(kind Kind, message string) *Error {
	return &Error{Kind: kind, Message: message}
}

// Wrap returns a user-visible error whose cause is err.
func Wrap(err error, kind Kind, message string) *Error {
	return &Error{Kind: kind, Message: message, Err: err}
}

// Error returns the message, followed by the cause when there is one.
func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// From returns the outermost *Error in err's chain, if any.
func From(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}
