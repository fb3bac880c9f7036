package upload

import (
	"bytes"
	"errors"
	"mime/multipart"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/usererr"
)

type part struct{ field, name, body string }

func form(t *testing.T, parts ...part) *multipart.Reader {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		w, err := mw.CreateFormFile(p.field, p.name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(p.body))
	}
	_ = mw.Close()
	return multipart.NewReader(&buf, mw.Boundary())
}

func newFS(t *testing.T) (*sandbox.FS, string) {
	t.Helper()
	dir := t.TempDir()
	fs, err := sandbox.New(dir, sandbox.Options{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs.Close() })
	return fs, dir
}

func TestStoreWritesEveryFilesPart(t *testing.T) {
	fs, dir := newFS(t)
	err := Store(Request{Files: fs, Dir: "/a/b", LimitMB: 1, Form: form(t,
		part{"files", "one.txt", "1"}, part{"other", "skip.txt", "x"}, part{"files", `C:\dir\two.txt`, "22"})})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"one.txt": "1", "two.txt": "22"} {
		got, err := os.ReadFile(filepath.Join(dir, "a", "b", name))
		if err != nil || string(got) != want {
			t.Fatalf("%s: %q, %v", name, got, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a", "b", "skip.txt")); err == nil {
		t.Fatal("a part that is not `files` was stored")
	}
}

// A file over the limit is refused with a message naming it, and nothing of
// it is left behind.
func TestStoreRefusesAFileOverTheLimit(t *testing.T) {
	fs, dir := newFS(t)
	big := strings.Repeat("x", 1<<20+1)
	err := Store(Request{Files: fs, Dir: "/", LimitMB: 1, Form: form(t, part{"files", "big.bin", big})})
	var tl *TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v", err)
	}
	ue, ok := usererr.From(err)
	if !ok || ue.Kind != usererr.Invalid || ue.Message != "File big.bin is larger than the maximum file upload size of 1 MB." {
		t.Fatalf("user error %+v", ue)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
}

func TestStoreRefusals(t *testing.T) {
	fs, _ := newFS(t)
	if err := Store(Request{Files: fs, LimitMB: 1, Form: form(t, part{"other", "a", "b"})}); !errors.Is(err, ErrNoFiles) {
		t.Fatalf("no files: %v", err)
	}
	if err := Store(Request{Files: fs, LimitMB: 1, Form: form(t, part{"files", "..", "b"})}); !errors.Is(err, ErrNoName) {
		t.Fatalf("bad name: %v", err)
	}
	broken := multipart.NewReader(strings.NewReader("--x\r\nnot a header\r\n"), "x")
	if err := Store(Request{Files: fs, LimitMB: 1, Form: broken}); !errors.Is(err, ErrBadForm) {
		t.Fatalf("broken form: %v", err)
	}
}
