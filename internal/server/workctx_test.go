package server

import (
	"context"
	"errors"
	"testing"
)

func TestWorkContextEndsWithTheServer(t *testing.T) {
	sctx, endServer := context.WithCancel(context.Background())
	s := &Server{ctx: sctx}
	ctx, cancel := s.WorkContext(context.Background())
	defer cancel()
	if ctx.Err() != nil {
		t.Fatal("the work context ended before the server")
	}
	endServer()
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), ErrServerGone) {
		t.Fatalf("cause %v, want ErrServerGone", context.Cause(ctx))
	}
}

func TestWorkContextEndsWithTheCaller(t *testing.T) {
	s := &Server{ctx: context.Background()}
	req, hangUp := context.WithCancel(context.Background())
	ctx, cancel := s.WorkContext(req)
	defer cancel()
	hangUp()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", ctx.Err())
	}
}
