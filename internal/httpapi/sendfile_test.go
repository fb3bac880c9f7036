package httpapi

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// readFromRecorder is a response writer that, like net/http's, can take a
// whole file with ReadFrom; it records what it was given.
type readFromRecorder struct {
	*httptest.ResponseRecorder
	sources []io.Reader
}

func (r *readFromRecorder) ReadFrom(src io.Reader) (int64, error) {
	r.sources = append(r.sources, src)
	return io.Copy(r.ResponseRecorder, src)
}

// A download reaches the connection's ReadFrom with the file itself, through
// every middleware: that is what lets net/http use sendfile.
func TestDownloadReachesReadFromWithTheFile(t *testing.T) {
	srv, id, data := benchNode(t)
	srv.Close() // only its handler is used here
	content := bytes.Repeat([]byte("wharf "), 100_000)
	if err := os.WriteFile(filepath.Join(data, "world.bin"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	tok := signed(t, map[string]any{"file_path": "world.bin", "server_uuid": id})
	rec := &readFromRecorder{ResponseRecorder: httptest.NewRecorder()}
	srv.Config.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/download/file?token="+tok, nil))
	if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), content) {
		t.Fatalf("status %d, %d bytes", rec.Code, rec.Body.Len())
	}
	if len(rec.sources) != 1 {
		t.Fatalf("ReadFrom called %d times", len(rec.sources))
	}
	src := rec.sources[0]
	if lr, ok := src.(*io.LimitedReader); ok {
		src = lr.R
	}
	if _, ok := src.(*os.File); !ok {
		t.Fatalf("ReadFrom got a %T, not the file", src)
	}
}

// The middleware wraps the writer once, and the access log still counts the
// bytes sent by ReadFrom.
func TestStatusWriterWrapsOnceAndCountsReadFrom(t *testing.T) {
	rec := &readFromRecorder{ResponseRecorder: httptest.NewRecorder()}
	outer := wrapStatus(rec)
	if inner := wrapStatus(outer); inner != outer {
		t.Fatal("a statusWriter was wrapped again")
	}
	n, err := io.Copy(outer, io.LimitReader(bytes.NewReader(make([]byte, 1000)), 700))
	if err != nil || n != 700 || outer.bytes != 700 || outer.status != http.StatusOK {
		t.Fatalf("n %d, err %v, bytes %d, status %d", n, err, outer.bytes, outer.status)
	}
	if len(rec.sources) != 1 {
		t.Fatalf("the underlying ReadFrom was called %d times", len(rec.sources))
	}
}
