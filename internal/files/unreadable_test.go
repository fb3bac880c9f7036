package files

import (
	"errors"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/usererr"
)

// A walk's read failure becomes a 409 that names the path; an uncheckable
// deep entry a 400 that says why; other errors pass unchanged.
func TestUnreadableNamesThePath(t *testing.T) {
	emfile := &sandbox.Error{Op: "walk", Path: "/a/b", Errno: 24}
	ue, ok := usererr.From(unreadable(emfile, "the archive was not made."))
	if !ok || ue.Kind != usererr.Conflict || ue.Message != "Cannot read /a/b (too many open files): the archive was not made." {
		t.Fatalf("EMFILE: %.600s", ue.Message)
	}
	deep := &sandbox.Error{Op: "open", Path: "/" + strings.Repeat("d/", 3000) + "f", Kind: sandbox.ErrUncheckable}
	ue, ok = usererr.From(unreadable(deep, "x"))
	if !ok || ue.Kind != usererr.Invalid || !strings.Contains(ue.Message, "(3000 levels)") || len(ue.Message) > 400 {
		t.Fatalf("deep: %.600s", ue.Message)
	}
	write := &sandbox.Error{Op: "write", Path: "/out.tar.gz", Errno: 5}
	if got := unreadable(write, "x"); got != error(write) {
		t.Fatalf("a write error changed: %v", got)
	}
	if got := unreadable(errors.ErrUnsupported, "x"); got != errors.ErrUnsupported {
		t.Fatalf("a plain error changed: %v", got)
	}
}
