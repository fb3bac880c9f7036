package transfer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/testutil/tree"
)

func newFS(t *testing.T, root string) *sandbox.FS { return tree.Open(t, root) }

func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	s, err := tree.Snapshot(root)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// target answers like a target node: receive into dst, 200 or 400.
type target struct {
	dst   *sandbox.FS
	mu    sync.Mutex
	auth  string
	ctype string
	parts []string // form names and file names, in order
	raw   []byte   // the archive part's bytes
	sent  string   // the checksum field
	// sentArchive is the checksum_archive field.
	sentArchive string
	lastErr     error
}

func (tg *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tg.mu.Lock()
	tg.auth, tg.ctype = r.Header.Get("Authorization"), r.Header.Get("Content-Type")
	tg.mu.Unlock()
	// Record the form on the side while the real receiver reads it.
	var copyBuf bytes.Buffer
	r.Body = io.NopCloser(io.TeeReader(r.Body, &copyBuf))
	mr, err := r.MultipartReader()
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	err = receive(r.Context(), mr, tg.dst, archive.ExtractOptions{}, newExtras(filepath.Join(tg.dst.Root(), ".backups"), slog.Default()))
	tg.mu.Lock()
	tg.lastErr = err
	tg.mu.Unlock()
	tg.record(r.Header.Get("Content-Type"), copyBuf.Bytes())
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	w.WriteHeader(200)
}

func (tg *target) record(ctype string, body []byte) {
	_, params, _ := strings.Cut(ctype, "boundary=")
	mr := multipart.NewReader(bytes.NewReader(body), params)
	tg.mu.Lock()
	defer tg.mu.Unlock()
	for {
		p, err := mr.NextPart()
		if err != nil {
			return
		}
		data, _ := io.ReadAll(p)
		tg.parts = append(tg.parts, p.FormName()+":"+p.FileName())
		switch p.FormName() {
		case "archive":
			tg.raw = data
		case "checksum":
			tg.sent = string(data)
		case "checksum_archive":
			tg.sentArchive = string(data)
		}
	}
}

func TestPushReceiveRoundTrip(t *testing.T) {
	srcDir, dstDir := t.TempDir(), t.TempDir()
	if err := tree.Build(srcDir, 3<<20); err != nil {
		t.Fatal(err)
	}
	tg := &target{dst: newFS(t, dstDir)}
	ts := httptest.NewServer(tg)
	defer ts.Close()
	var last archive.Progress
	err := push(context.Background(), ts.Client(), ts.URL, "Bearer a.b.c", newFS(t, srcDir), archive.LevelBestSpeed, func(p archive.Progress) { last = p }, outgoing{})
	if err != nil {
		t.Fatalf("push: %v (target: %v)", err, tg.lastErr)
	}
	if diff := cmp.Diff(snapshot(t, srcDir), snapshot(t, dstDir)); diff != "" {
		t.Fatalf("tree differs (-src +dst):\n%s", diff)
	}
	if tg.auth != "Bearer a.b.c" || !strings.HasPrefix(tg.ctype, "multipart/form-data; boundary=") {
		t.Fatalf("headers: %q %q", tg.auth, tg.ctype)
	}
	// Both checksum names: Pterodactyl Wings' target requires the first,
	// Pelican Wings' the second.
	if want := []string{"archive:archive.tar.gz", "checksum:", "checksum_archive:"}; !cmp.Equal(tg.parts, want) {
		t.Fatalf("parts %v, want %v", tg.parts, want)
	}
	sum := sha256.Sum256(tg.raw)
	if tg.sent != hex.EncodeToString(sum[:]) || tg.sentArchive != tg.sent {
		t.Fatalf("checksum %q is not the SHA-256 of the archive bytes", tg.sent)
	}
	if last.Input < 3<<20 {
		t.Fatalf("progress reported %d file bytes", last.Input)
	}
}

// A transfer carries no per-file manifest: a server file that happens to
// have the manifest's name is an ordinary file at both ends.
func TestPushReceiveFileNamedLikeTheManifest(t *testing.T) {
	srcDir, dstDir := t.TempDir(), t.TempDir()
	if err := tree.Build(srcDir, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(srcDir, archive.ManifestName), []byte("not a manifest\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	tg := &target{dst: newFS(t, dstDir)}
	ts := httptest.NewServer(tg)
	defer ts.Close()
	if err := push(context.Background(), ts.Client(), ts.URL, "x", newFS(t, srcDir), archive.LevelBestSpeed, nil, outgoing{}); err != nil {
		t.Fatalf("push: %v (target: %v)", err, tg.lastErr)
	}
	if diff := cmp.Diff(snapshot(t, srcDir), snapshot(t, dstDir)); diff != "" {
		t.Fatalf("tree differs (-src +dst):\n%s", diff)
	}
}

func TestPushTokenAsGiven(t *testing.T) {
	tg := &target{dst: newFS(t, t.TempDir())}
	ts := httptest.NewServer(tg)
	defer ts.Close()
	if err := push(context.Background(), ts.Client(), ts.URL, "raw-token-without-scheme", newFS(t, t.TempDir()), archive.LevelBestSpeed, nil, outgoing{}); err != nil {
		t.Fatal(err)
	}
	if tg.auth != "raw-token-without-scheme" {
		t.Fatalf("Authorization %q", tg.auth)
	}
}

func TestPushNon200NamesTheStatus(t *testing.T) {
	for _, code := range []int{201, 401, 409, 500} {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(code)
		}))
		src := t.TempDir()
		if err := tree.Build(src, 1<<20); err != nil {
			t.Fatal(err)
		}
		err := push(context.Background(), ts.Client(), ts.URL, "x", newFS(t, src), archive.LevelBestSpeed, nil, outgoing{})
		var se *StatusError
		if !errors.As(err, &se) || se.Code != code || !strings.Contains(err.Error(), "unexpected status code from destination: "+strconv.Itoa(code)) {
			t.Errorf("status %d: %v", code, err)
		}
		ts.Close()
	}
}

// An early answer (before the body was read) ends the push at once.
func TestPushEarlyAnswer(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer ts.Close()
	src := t.TempDir()
	if err := tree.Build(src, 16<<20); err != nil {
		t.Fatal(err)
	}
	err := push(context.Background(), ts.Client(), ts.URL, "x", newFS(t, src), archive.LevelBestSpeed, nil, outgoing{})
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 401 {
		t.Fatalf("%v", err)
	}
}

func TestPushCancelWhileTheTargetStalls(t *testing.T) {
	stalled := make(chan struct{})
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 4096)
		_, _ = r.Body.Read(buf)
		close(stalled)
		<-release
	}))
	defer ts.Close()
	defer close(release)
	src := t.TempDir()
	if err := tree.Build(src, 16<<20); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- push(ctx, ts.Client(), ts.URL, "x", newFS(t, src), archive.LevelNone, nil, outgoing{})
	}()
	<-stalled
	cancel(ErrCancelled)
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("push succeeded after cancel")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("push did not end after cancel")
	}
}

// form builds a multipart body by hand.
func form(t *testing.T, parts ...[2]string) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		var w io.Writer
		var err error
		if p[0] == "archive" || strings.HasPrefix(p[0], "backup_") {
			w, err = mw.CreateFormFile(p[0], p[0]+".tar.gz")
		} else {
			w, err = mw.CreateFormField(p[0])
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(w, p[1])
	}
	_ = mw.Close()
	return mw.Boundary(), buf.Bytes()
}

func smallArchive(t *testing.T) (string, string) {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "a.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := archive.Write(context.Background(), &buf, newFS(t, src), archive.WriteOptions{Level: archive.LevelBestSpeed}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.String(), hex.EncodeToString(sum[:])
}

func TestReceiveForms(t *testing.T) {
	arc, sum := smallArchive(t)
	bad := []byte(arc)
	bad[len(bad)/2] ^= 0xff
	wrongSum := strings.Repeat("0", 64)
	cases := []struct {
		name  string
		parts [][2]string
		want  error
	}{
		{"checksum", [][2]string{{"archive", arc}, {"checksum", sum}}, nil},
		{"checksum_archive", [][2]string{{"archive", arc}, {"checksum_archive", sum}}, nil},
		{"upper-case hex", [][2]string{{"archive", arc}, {"checksum", strings.ToUpper(sum)}}, nil},
		{"unknown parts ignored", [][2]string{{"archive", arc}, {"logs_../../../tmp/pwn", "x"}, {"checksum", sum}}, nil},
		{"a backup part named as a path is refused (F8)", [][2]string{{"archive", arc}, {"backup_../../../tmp/pwn", "x"}, {"checksum", sum}}, ErrBadForm},
		{"wrong checksum", [][2]string{{"archive", arc}, {"checksum", wrongSum}}, ErrChecksumMismatch},
		{"not hex", [][2]string{{"archive", arc}, {"checksum", "zz"}}, ErrChecksumMismatch},
		{"checksum first", [][2]string{{"checksum", sum}, {"archive", arc}}, ErrBadForm},
		{"no checksum", [][2]string{{"archive", arc}}, ErrBadForm},
		{"no archive", [][2]string{}, ErrBadForm},
		{"two archives", [][2]string{{"archive", arc}, {"archive", arc}, {"checksum", sum}}, ErrBadForm},
		{"corrupt archive", [][2]string{{"archive", string(bad)}, {"checksum", sum}}, nil /* either */},
		{"truncated archive", [][2]string{{"archive", arc[:len(arc)/2]}, {"checksum", sum}}, ErrBadArchive},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := t.TempDir()
			boundary, body := form(t, c.parts...)
			err := receive(context.Background(), multipart.NewReader(bytes.NewReader(body), boundary), newFS(t, dst), archive.ExtractOptions{}, newExtras(t.TempDir(), slog.Default()))
			if c.name == "corrupt archive" {
				if !errors.Is(err, ErrBadArchive) && !errors.Is(err, ErrChecksumMismatch) {
					t.Fatalf("corrupt: %v", err)
				}
				return
			}
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("receive: %v, want %v", err, c.want)
			}
			if _, err := os.Lstat("/tmp/pwn"); err == nil {
				t.Fatal("a part name became a path")
			}
		})
	}
}

func TestLogLine(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	got := logLine(at, "hello")
	want := "\x1b[33m\x1b[1mThu, 02 Jan 2025 03:04:05 UTC [Transfer System] [Source Node]:\x1b[39m hello\x1b[0m"
	if got != want {
		t.Fatalf("%q\n%q", got, want)
	}
	for _, c := range []struct {
		done, total int64
		want        string
	}{
		{0, 100 << 20, "[>                        ] 0 B / 100.0 MiB"},
		{50 << 20, 100 << 20, "[============>            ] 50.0 MiB / 100.0 MiB"},
		{100 << 20, 100 << 20, "[=========================] 100.0 MiB / 100.0 MiB"},
		{3 << 30, 1 << 30, "[=========================] 3.0 GiB / 1.0 GiB"},
		{10, 0, "[>                        ] 10 B / 0 B"},
	} {
		if got := progressBar(c.done, c.total); got != c.want {
			t.Errorf("progressBar(%d, %d) = %q, want %q", c.done, c.total, got, c.want)
		}
	}
}
