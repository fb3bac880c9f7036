package sandbox

import (
	"context"
	"io"
)

// ctxReader fails reads with ctx.Err() once ctx is done, so that a copy
// loop stops between two chunks when its caller is gone.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
