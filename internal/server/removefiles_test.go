package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/wharf/wharf/internal/runtime/runtimetest"
)

// Delete removes the whole tree through the sandbox, denylisted files and
// deep directories included, and the server's directory itself.
func TestDeleteRemovesTheTreeThroughTheSandbox(t *testing.T) {
	e, s := newFakeEnv(t, runtimetest.Process{})
	root := s.DataDir()
	if err := os.MkdirAll(filepath.Join(root, "a/b/c"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a/b/c/deep.txt", "secret.key", "top.txt"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.files.SetDenylist([]string{"*.key"})
	if err := e.m.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(root); !os.IsNotExist(err) {
		t.Fatalf("the server's directory is still there: %v", err)
	}
}
