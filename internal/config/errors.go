package config

import (
	"errors"

	"github.com/wharf/wharf/internal/usererr"
)

// userError gives the errors of a panel update the message the panel is
// shown (400): the parser's account of the body, or the list of invalid
// keys. Both describe only what the caller sent.
func userError(err error) error {
	var (
		decodeErr *DecodeError
		validErr  *ValidationError
	)
	switch {
	case errors.As(err, &decodeErr):
		return usererr.Wrap(err, usererr.Invalid, "The data passed in the request was not in a parsable format: "+decodeErr.Err.Error())
	case errors.As(err, &validErr):
		return usererr.Wrap(err, usererr.Invalid, err.Error())
	}
	return err
}
