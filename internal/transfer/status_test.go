package transfer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/wharf/wharf/internal/events"
)

type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) publish(e events.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Name == events.TransferStatus {
		r.got = append(r.got, e.Args[0])
	}
}

func (r *recorder) statuses() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func TestStatusTable(t *testing.T) {
	all := []Status{Pending, Processing, Cancelling, Cancelled, Failed, Completed}
	allowed := map[[2]Status]bool{
		{Pending, Processing}: true, {Pending, Cancelling}: true, {Pending, Failed}: true,
		{Processing, Cancelling}: true, {Processing, Completed}: true, {Processing, Failed}: true,
		{Cancelling, Cancelled}: true, {Cancelling, Completed}: true,
	}
	for _, from := range all {
		for _, to := range all {
			if got := CanTransition(from, to); got != allowed[[2]Status{from, to}] {
				t.Errorf("%s -> %s: %v", from, to, got)
			}
		}
	}
	for _, s := range []Status{Cancelled, Failed, Completed} {
		if !s.Final() {
			t.Errorf("%s is not final", s)
		}
	}
}

func TestCancelByStatus(t *testing.T) {
	cases := []struct {
		name    string
		steps   func(tr *Transfer)
		wantErr error
		want    []string
	}{
		{"pending", func(*Transfer) {}, nil, []string{"cancelling"}},
		{"processing", func(tr *Transfer) { tr.setStatus(Processing) }, nil, []string{"processing", "cancelling"}},
		{"cancelling", func(tr *Transfer) { tr.setStatus(Cancelling) }, ErrNotCancellable, []string{"cancelling"}},
		{"cancelled", func(tr *Transfer) { tr.setStatus(Cancelling); tr.finish(errors.New("x")) }, ErrNotCancellable, []string{"cancelling", "cancelled"}},
		{"completed", func(tr *Transfer) { tr.setStatus(Processing); tr.finish(nil) }, ErrNotCancellable, []string{"processing", "completed"}},
		{"failed", func(tr *Transfer) { tr.setStatus(Processing); tr.finish(errors.New("x")) }, ErrNotCancellable, []string{"processing", "failed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := &recorder{}
			tr := newTransfer(context.Background(), "s", rec.publish)
			c.steps(tr)
			before := tr.Status()
			err := tr.Cancel()
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("Cancel: %v, want %v", err, c.wantErr)
			}
			if err == nil {
				if tr.Status() != Cancelling || !errors.Is(context.Cause(tr.Context()), ErrCancelled) {
					t.Fatalf("status %s, cause %v", tr.Status(), context.Cause(tr.Context()))
				}
			} else if tr.Status() != before {
				t.Fatalf("a refused cancel changed the status: %s -> %s", before, tr.Status())
			}
			if got := rec.statuses(); !slices.Equal(got, c.want) {
				t.Fatalf("published %v, want %v", got, c.want)
			}
		})
	}
}

func TestFinish(t *testing.T) {
	for _, c := range []struct {
		name   string
		cancel bool
		err    error
		want   Status
	}{
		{"success", false, nil, Completed},
		{"error", false, errors.New("boom"), Failed},
		{"cancelled", true, context.Canceled, Cancelled},
		{"target confirmed after the cancel", true, nil, Completed},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := newTransfer(context.Background(), "s", nil)
			tr.setStatus(Processing)
			if c.cancel {
				if err := tr.Cancel(); err != nil {
					t.Fatal(err)
				}
			}
			if got := tr.finish(c.err); got != c.want {
				t.Fatalf("finish: %s, want %s", got, c.want)
			}
			if tr.Context().Err() == nil {
				t.Fatal("context still alive after finish")
			}
		})
	}
}

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	if err := r.Cancel("a"); !errors.Is(err, ErrNotTransferring) {
		t.Fatalf("cancel of nothing: %v", err)
	}
	a := newTransfer(context.Background(), "a", nil)
	if err := r.add(a); err != nil {
		t.Fatal(err)
	}
	if err := r.add(newTransfer(context.Background(), "a", nil)); !errors.Is(err, ErrInProgress) {
		t.Fatalf("second add: %v", err)
	}
	if err := r.Cancel("a"); err != nil {
		t.Fatal(err)
	}
	if err := r.Cancel("a"); !errors.Is(err, ErrNotCancellable) {
		t.Fatalf("second cancel: %v", err)
	}
	r.remove(newTransfer(context.Background(), "a", nil)) // not the registered one
	if r.Len() != 1 {
		t.Fatal("removed a transfer that was not registered")
	}
	r.remove(a)
	if r.Len() != 0 {
		t.Fatal("not removed")
	}
}

func TestConcurrentCancelAcceptedOnce(t *testing.T) {
	tr := newTransfer(context.Background(), "s", nil)
	tr.setStatus(Processing)
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	for range 32 {
		wg.Go(func() {
			if tr.Cancel() == nil {
				mu.Lock()
				accepted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if accepted != 1 {
		t.Fatalf("%d cancels accepted", accepted)
	}
}
