// Package transfer moves a server between nodes: the source streams a
// tar.gz of the server's files to the target node's /api/transfers, the
// target extracts it while hashing it and registers the server. This file
// holds the status machine and the registries of active transfers.
package transfer

import (
	"context"
	"errors"
	"sync"

	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/usererr"
)

// Status is a transfer's status, as the `transfer status` event shows it.
type Status string

// The six statuses of the spec.
const (
	Pending    Status = "pending"
	Processing Status = "processing"
	Cancelling Status = "cancelling"
	Cancelled  Status = "cancelled"
	Failed     Status = "failed"
	Completed  Status = "completed"
)

// Errors a user (the panel, or the source node) may see.
var (
	// ErrNotTransferring: a cancel for a server that has no active transfer (409).
	ErrNotTransferring = usererr.New(usererr.Conflict, "Server is not currently being transferred.")
	// ErrNotCancellable: a cancel while cancelling or after the end (409).
	ErrNotCancellable = usererr.New(usererr.Conflict, "The transfer is already being cancelled or has finished.")
	// ErrInProgress: a second transfer of the same server (409).
	ErrInProgress = usererr.New(usererr.Conflict, "A transfer is already in progress for this server.")
	// ErrCancelled is the cause of a transfer's context after a cancel request.
	ErrCancelled = usererr.New(usererr.Conflict, "The transfer was cancelled.")
	// ErrSourceGone: the request of an incoming transfer ended before its end
	// (the source died or went away, or this daemon is shutting down).
	ErrSourceGone = errors.New("the connection from the source ended before the end of the transfer")
)

// transitions is the table of the spec, plus the ends the spec leaves out:
// a transfer that fails before or while streaming is failed; a cancelled
// transfer ends cancelled once its resources are released; a transfer whose
// target already confirmed when the cancel arrived ends completed, because
// the server then lives on the target.
var transitions = map[Status][]Status{
	Pending:    {Processing, Cancelling, Failed},
	Processing: {Cancelling, Completed, Failed},
	Cancelling: {Cancelled, Completed},
}

// CanTransition reports whether the status machine allows from -> to.
func CanTransition(from, to Status) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Final reports whether no transition leaves s.
func (s Status) Final() bool { return len(transitions[s]) == 0 }

// Transfer is one transfer of one server, outgoing or incoming.
type Transfer struct {
	server  string
	ctx     context.Context
	cancel  context.CancelCauseFunc
	publish func(events.Event)
	// job is an outgoing transfer's claim of the server's job slot: its
	// writable filesystem is the only one the sender reads with directory
	// handles (the live sender); nil for an incoming transfer.
	job *server.Job

	mu     sync.Mutex
	status Status
}

// newTransfer returns a pending transfer bound to parent. publish receives
// every status change (it may be swapped with setPublisher before the first
// change is published).
func newTransfer(parent context.Context, server string, publish func(events.Event)) *Transfer {
	ctx, cancel := context.WithCancelCause(parent)
	if publish == nil {
		publish = func(events.Event) {}
	}
	return &Transfer{server: server, ctx: ctx, cancel: cancel, publish: publish, status: Pending}
}

// Server is the UUID of the server being transferred.
func (t *Transfer) Server() string { return t.server }

// Context is cancelled when the transfer is cancelled or has ended.
func (t *Transfer) Context() context.Context { return t.ctx }

// Status returns the current status.
func (t *Transfer) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status
}

// announce publishes the current status (the move into pending).
func (t *Transfer) announce() {
	t.mu.Lock()
	st, pub := t.status, t.publish
	t.mu.Unlock()
	pub(events.New(events.TransferStatus, string(st)))
}

// setPublisher directs the status events (an incoming transfer's server
// exists only once it is registered).
func (t *Transfer) setPublisher(p func(events.Event)) {
	t.mu.Lock()
	t.publish = p
	t.mu.Unlock()
}

// setStatus moves the machine when the table allows it and publishes the
// change; it reports whether the move happened.
func (t *Transfer) setStatus(to Status) bool {
	t.mu.Lock()
	if !CanTransition(t.status, to) {
		t.mu.Unlock()
		return false
	}
	t.status = to
	pub := t.publish
	t.mu.Unlock()
	pub(events.New(events.TransferStatus, string(to)))
	return true
}

// Cancel asks the transfer to stop: pending or processing moves to
// cancelling and the context is cancelled; any other status is
// ErrNotCancellable. The owner of the transfer finishes the move into
// cancelled once the resources are released.
func (t *Transfer) Cancel() error {
	if !t.setStatus(Cancelling) {
		return ErrNotCancellable
	}
	t.cancel(ErrCancelled)
	return nil
}

// finish moves the transfer to its end: completed when err is nil,
// cancelled when a cancel was accepted, failed otherwise. It returns the
// final status and releases the context.
func (t *Transfer) finish(err error) Status {
	defer t.cancel(context.Canceled)
	switch {
	case err == nil && t.setStatus(Completed):
	case t.setStatus(Cancelled):
	default:
		t.setStatus(Failed)
	}
	return t.Status()
}

// Registry holds the active transfers of one direction, by server UUID.
type Registry struct {
	mu sync.Mutex
	m  map[string]*Transfer
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{m: map[string]*Transfer{}} }

// add registers t; a server already in the registry is ErrInProgress.
func (r *Registry) add(t *Transfer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[t.server]; ok {
		return ErrInProgress
	}
	r.m[t.server] = t
	return nil
}

// Get returns the active transfer of a server.
func (r *Registry) Get(server string) (*Transfer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.m[server]
	return t, ok
}

// Len is the number of active transfers.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// remove unregisters t (and nothing registered in its place since).
func (r *Registry) remove(t *Transfer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[t.server] == t {
		delete(r.m, t.server)
	}
}

// Cancel cancels the active transfer of a server: ErrNotTransferring when
// there is none, ErrNotCancellable when it is already cancelling or ending.
func (r *Registry) Cancel(server string) error {
	t, ok := r.Get(server)
	if !ok {
		return ErrNotTransferring
	}
	return t.Cancel()
}
