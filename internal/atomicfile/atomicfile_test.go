package atomicfile

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWriteReplacesContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := WriteFile(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("two"), 0o640); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	st, _ := os.Stat(path)
	if string(b) != "two" || st.Mode().Perm() != 0o640 {
		t.Fatalf("content %q mode %o", b, st.Mode().Perm())
	}
}

func TestFailedFillLeavesOldFileAndNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, 0o600, func(w io.Writer) error {
		_, _ = w.Write([]byte("half of the new"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	b, _ := os.ReadFile(path)
	if string(b) != "old" {
		t.Fatalf("content = %q, want old", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file (temp not removed)", len(entries))
	}
}

// TestCrashBeforeRenameKeepsOldFile kills a child process (SIGKILL) after the
// new content is written and synced but before the rename: the old file must
// be intact.
func TestCrashBeforeRenameKeepsOldFile(t *testing.T) {
	if path := os.Getenv("ATOMICFILE_CRASH_CHILD"); path != "" {
		crash := func(string) { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
		_ = write(path, 0o600, func(w io.Writer) error { _, err := w.Write([]byte("new content")); return err }, crash)
		t.Fatal("the child survived its own SIGKILL")
	}
	path := filepath.Join(t.TempDir(), "config.yml")
	if err := WriteFile(path, []byte("old content"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashBeforeRenameKeepsOldFile$")
	cmd.Env = append(os.Environ(), "ATOMICFILE_CRASH_CHILD="+path)
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(ee.String(), "killed") {
		t.Fatalf("child did not die by SIGKILL: %v", err)
	}
	b, _ := os.ReadFile(path)
	if string(b) != "old content" {
		t.Fatalf("after the crash the file holds %q, want the old content", b)
	}
}
