package server

import (
	"context"

	"github.com/wharf/wharf/internal/sandbox"
)

// Job is a claim of a server's job slot (BeginJob) and the only door to
// the server's writable filesystem (FS): Server.Files is read-only, so the
// compiler refuses a change to the files of a server made without a job.
// Its context ends when the job ends, when the caller's context ends, when
// the server ends (deleted, or no longer managed: the cause is
// ErrServerGone) and with any other context the job was begun with (the
// node beginning to stop). End releases the slot; it must be called
// exactly once whatever the outcome (again does nothing).
type Job struct {
	kind JobKind
	srv  *Server // nil for a job over a filesystem of no server (JobOver)
	fs   *sandbox.FS
	ctx  context.Context
	end  func()
}

// Kind is the job's kind.
func (j *Job) Kind() JobKind { return j.kind }

// Context is the job's context (see Job).
func (j *Job) Context() context.Context { return j.ctx }

// FS is the server's writable filesystem, for the job's changes only: do
// not keep it past End.
func (j *Job) FS() *sandbox.FS { return j.fs }

// Server is the server whose files the job owns (nil for JobOver).
func (j *Job) Server() *Server { return j.srv }

// End releases the job slot and ends the job's context.
func (j *Job) End() { j.end() }

// JobOver is a job over a filesystem that belongs to no managed server,
// with no slot to claim: for the tests and benchmarks of the jobs. Its
// context ends with ctx and at End.
func JobOver(ctx context.Context, kind JobKind, fsys *sandbox.FS) *Job {
	ctx, cancel := context.WithCancel(ctx)
	return &Job{kind: kind, fs: fsys, ctx: ctx, end: cancel}
}

// lifetime is the one builder of the lifetime of work on the server's
// files (a job's, WorkContext's): a context that ends with ctx, when the
// server ends (cause ErrServerGone), when any of also ends (nil ones are
// skipped), and when the returned stop is called (cause context.Canceled).
func (s *Server) lifetime(ctx context.Context, also []context.Context) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	stops := make([]func() bool, 0, 1+len(also))
	stops = append(stops, context.AfterFunc(s.ctx, func() { cancel(ErrServerGone) }))
	for _, a := range also {
		if a != nil {
			stops = append(stops, context.AfterFunc(a, func() { cancel(context.Cause(a)) }))
		}
	}
	return wctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(context.Canceled)
	}
}
