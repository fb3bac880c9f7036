package sandbox

import (
	"context"
	"io"
)

// ContextReader returns a reader of r whose reads fail with ctx.Err() once
// ctx is done, so that a copy loop stops between two chunks when its caller
// is gone (a huge, even sparse, file is not read to its end for nobody).
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

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
