package s3backend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// fail wraps a request's error with the operation and the object name.
// When missingIsNotExist, a missing key is an fs.ErrNotExist (a missing
// bucket never is: that is a configuration error, not an empty
// repository). The secret access key never goes on the wire, but an error
// that contains it anyway is flattened to text with it replaced.
func (b *Backend) fail(op, name string, err error, missingIsNotExist bool) error {
	var wrapped error
	if missingIsNotExist && isNoSuchKey(err) {
		wrapped = fmt.Errorf("s3backend: %s %s: %w (%w)", op, name, fs.ErrNotExist, err)
	} else {
		wrapped = fmt.Errorf("s3backend: %s %s in %s: %w", op, name, b, err)
	}
	if b.secret == "" || !strings.Contains(wrapped.Error(), b.secret) {
		return wrapped
	}
	return &scrubbed{msg: strings.ReplaceAll(wrapped.Error(), b.secret, "REDACTED"), kinds: kinds(wrapped)}
}

// isNoSuchKey: the store says the key does not exist (NoSuchKey from a
// GET, a bodiless 404 NotFound from a HEAD).
func isNoSuchKey(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	var api smithy.APIError
	return errors.As(err, &api) && (api.ErrorCode() == "NoSuchKey" || api.ErrorCode() == "NotFound")
}

// scrubbed is an error whose text had the secret in it: it keeps the text
// without it, and the kinds callers test with errors.Is.
type scrubbed struct {
	msg   string
	kinds []error
}

func (e *scrubbed) Error() string   { return e.msg }
func (e *scrubbed) Unwrap() []error { return e.kinds }

func kinds(err error) []error {
	var out []error
	for _, k := range []error{fs.ErrNotExist, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, k) {
			out = append(out, k)
		}
	}
	return out
}
