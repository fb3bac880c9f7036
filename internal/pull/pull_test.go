package pull

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/testutil/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Close cancels a background download, waits for it, and its temporary
// file is gone; nothing is left running.
func TestCloseCancelsAndCleansUp(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		_, _ = w.Write([]byte("01234"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	root := t.TempDir()
	fsys, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	svc := New(context.Background(), Options{MaxRedirects: 10, AllowLoopback: true})
	d, err := svc.Begin("s1", fsys, Request{URL: srv.URL + "/f.bin", Root: "/"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	svc.Start(context.Background(), d, func() { close(done) })
	wait.For(t, 5*time.Second, func() bool { return d.Progress() == 0.5 }, "half the file pulled")
	svc.Close()
	<-done
	entries, _ := os.ReadDir(root)
	if len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
	if got := svc.List("s1"); len(got) != 0 {
		t.Fatalf("still listed: %v", got)
	}
}

// Begin refuses bad URLs and a fourth download of one server.
func TestBeginRefusals(t *testing.T) {
	fsys, err := sandbox.New(t.TempDir(), sandbox.Options{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	svc := New(context.Background(), Options{MaxRedirects: 10})
	defer svc.Close()
	for _, u := range []string{"", "ftp://x/y", "http://", "//x/y", "http://u:p@x/y"} {
		if _, err := svc.Begin("s", fsys, Request{URL: u, Root: "/"}); !errors.Is(err, ErrBadURL) {
			t.Errorf("Begin(%q) = %v", u, err)
		}
	}
	for i := range 3 {
		if _, err := svc.Begin("s", fsys, Request{URL: "http://example.com/x", Root: "/"}); err != nil {
			t.Fatal(i, err)
		}
	}
	if _, err := svc.Begin("s", fsys, Request{URL: "http://example.com/x", Root: "/"}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("fourth: %v", err)
	}
	if _, err := svc.Begin("other", fsys, Request{URL: "http://example.com/x", Root: "/"}); err != nil {
		t.Fatalf("another server: %v", err)
	}
}
