package usererr

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestFromFindsTheUserErrorInAChain(t *testing.T) {
	sentinel := New(Conflict, "The server is being restored.")
	err := fmt.Errorf("restore: %w", sentinel)
	got, ok := From(err)
	if !ok || got != sentinel {
		t.Fatalf("From(%v) = %v, %v; want the sentinel", err, got, ok)
	}
	if !errors.Is(err, sentinel) {
		t.Fatal("errors.Is does not find the sentinel")
	}
}

func TestWrapKeepsTheCauseOutOfTheMessage(t *testing.T) {
	err := Wrap(io.ErrUnexpectedEOF, Invalid, "The archive is damaged.")
	if err.Message != "The archive is damaged." {
		t.Fatalf("message %q", err.Message)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatal("the cause is lost")
	}
	if err.Error() != "The archive is damaged.: unexpected EOF" {
		t.Fatalf("Error() = %q", err.Error())
	}
}

func TestPlainErrorsAreNotUserErrors(t *testing.T) {
	if _, ok := From(errors.New("open /var/lib/x: permission denied")); ok {
		t.Fatal("a plain error was taken for a user error")
	}
	if _, ok := From(nil); ok {
		t.Fatal("nil was taken for a user error")
	}
}
