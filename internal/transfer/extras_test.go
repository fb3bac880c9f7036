package transfer

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/wharf/wharf/internal/archive"
)

const (
	testServer = "5c000001-0000-4000-8000-000000000001"
	testBackup = "5c0000b1-0000-4000-8000-0000000000b1"
)

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// A source sends the archive, both checksums, each backup followed by its
// checksum and the install log, in Pelican Wings' part names (its source:
// server/transfer/source.go, archive.go); a Wharf target puts the backup
// in the backup directory and the log where install logs are kept.
func TestPushCarriesBackupsAndInstallLog(t *testing.T) {
	srcDir, dstDir, backups, logs := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(srcDir, "a.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	backupBytes := tarGz(t, bytes.Repeat([]byte("backup bytes "), 100_000))
	backupPath := filepath.Join(t.TempDir(), testBackup+".tar.gz")
	logPath := filepath.Join(t.TempDir(), "install.log")
	if err := os.WriteFile(backupPath, backupBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, []byte("Script output:\ninstalled\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var parts []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var copyBuf bytes.Buffer
		r.Body = io.NopCloser(io.TeeReader(r.Body, &copyBuf))
		mr, err := r.MultipartReader()
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		x := newExtras(backups, slog.Default())
		defer x.discard()
		err = receive(r.Context(), mr, newFS(t, dstDir), archive.ExtractOptions{}, x)
		if err == nil {
			err = x.commit(context.Background(), testServer, logs)
		}
		parts = partNames(t, r.Header.Get("Content-Type"), copyBuf.Bytes())
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
	}))
	defer ts.Close()
	extra := outgoing{backups: []localBackup{{id: testBackup, path: backupPath}}, installLog: logPath}
	if err := push(context.Background(), ts.Client(), ts.URL, "x", newFS(t, srcDir), archive.LevelBestSpeed, nil, extra); err != nil {
		t.Fatal(err)
	}
	want := []string{"archive", "checksum", "checksum_archive", "backup_" + testBackup + ".tar.gz", "checksum_backup_" + testBackup + ".tar.gz", "install_logs"}
	if !cmp.Equal(parts, want) {
		t.Fatalf("parts %v, want %v", parts, want)
	}
	got, err := os.ReadFile(filepath.Join(backups, testBackup+".tar.gz"))
	if err != nil || !bytes.Equal(got, backupBytes) {
		t.Fatalf("the backup did not arrive intact: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(logs, "install", testServer+".log")); err != nil || string(got) != "Script output:\ninstalled\n" {
		t.Fatalf("install log %q %v", got, err)
	}
	assertNoStaging(t, backups)
}

func partNames(t *testing.T, ctype string, body []byte) []string {
	_, boundary, _ := strings.Cut(ctype, "boundary=")
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	var names []string
	for {
		p, err := mr.NextPart()
		if err != nil {
			return names
		}
		names = append(names, p.FormName())
	}
}

func assertNoStaging(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), stagingPrefix) {
			t.Fatalf("a staged backup was left: %s", e.Name())
		}
	}
}

// What a target accepts and refuses of the backup parts. Pelican Wings'
// target (router/router_transfer.go) verifies each backup against its
// checksum part once the form has ended, in any order.
func TestReceiveBackupParts(t *testing.T) {
	arc, sum := smallArchive(t)
	data := string(tarGz(t, []byte("backup data")))
	good := hexSum([]byte(data))
	b, cb := "backup_"+testBackup+".tar.gz", "checksum_backup_"+testBackup+".tar.gz"
	cases := []struct {
		name  string
		parts [][2]string
		want  error // nil: the backup is stored
	}{
		{"pelican form", [][2]string{{"archive", arc}, {"checksum_archive", sum}, {b, data}, {cb, good}, {"install_logs", "log"}}, nil},
		{"checksum before the backup", [][2]string{{"archive", arc}, {"checksum", sum}, {cb, good}, {b, data}}, nil},
		{"bad backup checksum", [][2]string{{"archive", arc}, {"checksum", sum}, {b, data}, {cb, strings.Repeat("0", 64)}}, ErrChecksumMismatch},
		{"no backup checksum", [][2]string{{"archive", arc}, {"checksum", sum}, {b, data}}, ErrBadForm},
		{"backup sent twice", [][2]string{{"archive", arc}, {"checksum", sum}, {b, data}, {b, data}, {cb, good}}, ErrBadForm},
		{"path in the name", [][2]string{{"archive", arc}, {"checksum", sum}, {"backup_../../pwn.tar.gz", data}}, ErrBadForm},
		{"uuid without the extension", [][2]string{{"archive", arc}, {"checksum", sum}, {"backup_" + testBackup, data}}, ErrBadForm},
		{"not a tar.gz", [][2]string{{"archive", arc}, {"checksum", sum}, {b, "backup data"}, {cb, hexSum([]byte("backup data"))}}, ErrNotABackup},
		{"gzip of no tar", [][2]string{{"archive", arc}, {"checksum", sum}, {b, string(gzipOf(t, []byte("x")))}, {cb, hexSum(gzipOf(t, []byte("x")))}}, ErrNotABackup},
		{"bad checksum part name", [][2]string{{"archive", arc}, {"checksum", sum}, {b, data}, {"checksum_backup_../x", good}}, ErrBadForm},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "backups")
			boundary, body := form(t, c.parts...)
			x := newExtras(dir, slog.Default())
			err := receive(context.Background(), multipart.NewReader(bytes.NewReader(body), boundary), newFS(t, t.TempDir()), archive.ExtractOptions{}, x)
			if err == nil {
				err = x.commit(context.Background(), testServer, t.TempDir())
			}
			x.discard()
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("receive: %v, want %v", err, c.want)
			}
			got, rerr := os.ReadFile(filepath.Join(dir, testBackup+".tar.gz"))
			if c.want == nil && string(got) != data {
				t.Fatalf("backup %q %v", got, rerr)
			}
			if c.want != nil && rerr == nil {
				t.Fatal("a refused backup was stored")
			}
			assertNoStaging(t, dir)
			if _, err := os.Lstat(filepath.Join(dir, "../../pwn.tar.gz")); err == nil {
				t.Fatal("a part name became a path")
			}
		})
	}
}

func TestReadTail(t *testing.T) {
	long := strings.Repeat("a", 100) + strings.Repeat("b", 50)
	got, err := readTail(strings.NewReader(long), 60)
	if err != nil || string(got) != strings.Repeat("a", 10)+strings.Repeat("b", 50) {
		t.Fatalf("%q %v", got, err)
	}
	got, err = readTail(strings.NewReader("short"), 60)
	if err != nil || string(got) != "short" {
		t.Fatalf("%q %v", got, err)
	}
}

// FuzzBackupPartID: a part's name yields a UUID or nothing, never a name
// with a path separator or dots.
func FuzzBackupPartID(f *testing.F) {
	for _, s := range []string{"backup_" + testBackup + ".tar.gz", "backup_../../x", "backup_" + testBackup, "checksum_backup_" + testBackup + ".tar.gz", "backup_/" + testBackup[1:] + ".tar.gz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		for _, prefix := range []string{partBackup, partBackupChecksum} {
			id, ok := backupPartID(name, prefix)
			if !ok {
				continue
			}
			if strings.ContainsAny(id, "/.\\\x00") || len(id) != 36 || filepath.Base(id) != id {
				t.Fatalf("%q gave %q", name, id)
			}
			if backupPartName(prefix, id) != name {
				t.Fatalf("%q is not the part name of %q", name, id)
			}
		}
	})
}

// The form a Wharf source sends meets both Wings targets' rules, read from
// their code and restated here. Pterodactyl
// Wings (pterodactyl/wings router/router_transfer.go): a part named exactly
// `checksum` after `archive`, hex of the archive's SHA-256; every other
// part skipped. Pelican Wings (pelican-dev/wings router/router_transfer.go):
// `checksum_archive` equal as a string to the lower-case hex SHA-256 of the
// archive, each `backup_<name>` with `checksum_backup_<name>` equal as a
// string to its lower-case hex SHA-256, anywhere in the form.
func TestSourceFormMeetsBothWingsTargets(t *testing.T) {
	srcDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(srcDir, "a.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	backupPath := filepath.Join(t.TempDir(), "b")
	if err := os.WriteFile(backupPath, []byte("backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	type part struct{ name, data string }
	var parts []part
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mr, err := r.MultipartReader()
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		for {
			p, err := mr.NextPart()
			if err != nil {
				return
			}
			data, _ := io.ReadAll(p)
			parts = append(parts, part{p.FormName(), string(data)})
		}
	}))
	defer ts.Close()
	extra := outgoing{backups: []localBackup{{id: testBackup, path: backupPath}}}
	if err := push(context.Background(), ts.Client(), ts.URL, "x", newFS(t, srcDir), archive.LevelBestSpeed, nil, extra); err != nil {
		t.Fatal(err)
	}

	// Pterodactyl Wings.
	var archiveSum string
	ptero := false
	for _, p := range parts {
		switch p.name {
		case "archive":
			archiveSum = hexSum([]byte(p.data))
		case "checksum":
			if archiveSum == "" {
				t.Fatal("Pterodactyl Wings: checksum before the archive")
			}
			ptero = strings.EqualFold(p.data, archiveSum)
		}
	}
	if !ptero {
		t.Fatal("Pterodactyl Wings would refuse the form: no matching checksum part")
	}

	// Pelican Wings.
	got := map[string]string{}
	for _, p := range parts {
		got[p.name] = p.data
	}
	if got["checksum_archive"] != hexSum([]byte(got["archive"])) {
		t.Fatal("Pelican Wings would refuse the form: checksum_archive")
	}
	backups := 0
	for name, data := range got {
		if rest, ok := strings.CutPrefix(name, "backup_"); ok {
			backups++
			if got["checksum_backup_"+rest] != hexSum([]byte(data)) || filepath.Base(rest) != testBackup+".tar.gz" {
				t.Fatalf("Pelican Wings would refuse or misplace backup part %q", name)
			}
		}
	}
	if backups != 1 {
		t.Fatalf("%d backup parts, want 1", backups)
	}
}

// A backup already on the node is never replaced by one a source sends
// under the same UUID (another server's, or an earlier transfer's).
func TestReceivedBackupNeverReplaces(t *testing.T) {
	arc, sum := smallArchive(t)
	mine := tarGz(t, []byte("mine"))
	dir := t.TempDir()
	existing := filepath.Join(dir, testBackup+".tar.gz")
	if err := os.WriteFile(existing, []byte("theirs"), 0o600); err != nil {
		t.Fatal(err)
	}
	boundary, body := form(t, [2]string{"archive", arc}, [2]string{"checksum", sum},
		[2]string{"backup_" + testBackup + ".tar.gz", string(mine)}, [2]string{"checksum_backup_" + testBackup + ".tar.gz", hexSum(mine)})
	x := newExtras(dir, slog.Default())
	defer x.discard()
	if err := receive(context.Background(), multipart.NewReader(bytes.NewReader(body), boundary), newFS(t, t.TempDir()), archive.ExtractOptions{}, x); err != nil {
		t.Fatal(err)
	}
	if err := x.commit(context.Background(), testServer, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(existing); string(got) != "theirs" {
		t.Fatalf("the backup here was replaced: %q", got)
	}
	assertNoStaging(t, dir)
}

// streamedBackup is a backup generated while it is sent: data, then err
// (io.EOF for a whole backup). It records that it was closed and that its
// context ended.
type streamedBackup struct {
	r        io.Reader
	closed   bool
	ctxEnded func() bool
}

func (s *streamedBackup) Read(p []byte) (int, error) { return s.r.Read(p) }
func (s *streamedBackup) Close() error               { s.closed = true; return nil }

func newStreamedBackup(data []byte, err error) (*streamedBackup, func(context.Context) (io.ReadCloser, error)) {
	s := &streamedBackup{r: io.MultiReader(bytes.NewReader(data), errReader{err})}
	return s, func(ctx context.Context) (io.ReadCloser, error) {
		s.ctxEnded = func() bool { return ctx.Err() != nil }
		return s, nil
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// A backup that is a stream (a repository backup's tar.gz) is sent with
// the same parts and a checksum over the bytes sent, and is closed; one
// that fails mid-stream (a damaged repository backup) fails the transfer
// with an error naming it, is closed and its context ends, and the target
// keeps nothing of it.
func TestPushStreamedBackup(t *testing.T) {
	srcDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(srcDir, "a.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	backupBytes := tarGz(t, bytes.Repeat([]byte("streamed backup "), 50_000))
	for _, tc := range []struct {
		name string
		err  error
	}{{"whole", io.EOF}, {"damaged", errors.New("chunk 0123 is damaged")}} {
		t.Run(tc.name, func(t *testing.T) {
			backups := t.TempDir()
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mr, err := r.MultipartReader()
				if err != nil {
					http.Error(w, err.Error(), 400)
					return
				}
				x := newExtras(backups, slog.Default())
				defer x.discard()
				err = receive(r.Context(), mr, newFS(t, t.TempDir()), archive.ExtractOptions{}, x)
				if err == nil {
					err = x.commit(context.Background(), testServer, t.TempDir())
				}
				if err != nil {
					http.Error(w, err.Error(), 400)
				}
			}))
			defer ts.Close()
			s, open := newStreamedBackup(backupBytes, tc.err)
			extra := outgoing{backups: []localBackup{{id: testBackup, open: open}}}
			err := push(context.Background(), ts.Client(), ts.URL, "x", newFS(t, srcDir), archive.LevelBestSpeed, nil, extra)
			ts.Close() // waits for the target's handler to end
			if !s.closed || !s.ctxEnded() {
				t.Fatalf("the stream was not closed (%v) or its context did not end", s.closed)
			}
			got, rerr := os.ReadFile(filepath.Join(backups, testBackup+".tar.gz"))
			if tc.err == io.EOF {
				if err != nil || rerr != nil || !bytes.Equal(got, backupBytes) {
					t.Fatalf("push: %v; the backup did not arrive intact: %v", err, rerr)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "backup "+testBackup) || !strings.Contains(err.Error(), "damaged") {
				t.Fatalf("push of a damaged backup: %v", err)
			}
			if rerr == nil {
				t.Fatal("the target kept a damaged backup")
			}
			assertNoStaging(t, backups)
		})
	}
}

// tarGz is a tar.gz archive of one file holding content.
func tarGz(tb testing.TB, content []byte) []byte {
	tb.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "data", Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		tb.Fatal(err)
	}
	_, _ = tw.Write(content)
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// gzipOf is content gzip-compressed.
func gzipOf(tb testing.TB, content []byte) []byte {
	tb.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(content)
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// The bounds of the backups a target accepts (issue 33 item 7): more
// backups or backup checksums than max_backups, or a backup over its size
// bound, fail the form, and nothing stays in the backup directory.
func TestReceiveBackupBounds(t *testing.T) {
	arc, sum := smallArchive(t)
	random := make([]byte, 3<<20)
	_, _ = rand.Read(random)
	big := tarGz(t, random)
	small := tarGz(t, []byte("small"))
	id := func(i int) string { return fmt.Sprintf("5c0000b1-0000-4000-8000-%012d", i) }
	backups := func(n int, data []byte) [][2]string {
		parts := [][2]string{{"archive", arc}, {"checksum", sum}}
		for i := range n {
			parts = append(parts, [2]string{"backup_" + id(i) + ".tar.gz", string(data)}, [2]string{"checksum_backup_" + id(i) + ".tar.gz", hexSum(data)})
		}
		return parts
	}
	checksums := func(n int) [][2]string {
		parts := [][2]string{{"archive", arc}, {"checksum", sum}}
		for i := range n {
			parts = append(parts, [2]string{"checksum_backup_" + id(i) + ".tar.gz", hexSum(small)})
		}
		return parts
	}
	for _, c := range []struct {
		name                string
		maxBackups, maxSize int
		disk                int64
		parts               [][2]string
		want                error
	}{
		{"as many as allowed", 3, 0, 1 << 20, backups(3, small), nil},
		{"one more than allowed", 3, 0, 1 << 20, backups(4, small), ErrTooManyBackups},
		{"none allowed", 0, 0, 0, backups(1, small), ErrTooManyBackups},
		{"checksums of backups never sent", 3, 0, 0, checksums(4), ErrTooManyBackups},
		{"over the disk limit", 3, 0, 1 << 20, backups(1, big), ErrBackupTooLarge},
		{"no disk limit", 3, 0, 0, backups(1, big), nil},
		{"over max_backup_size", 3, 2, 0, backups(1, big), ErrBackupTooLarge},
		{"within max_backup_size", 3, 4, 1 << 20, backups(1, big), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "backups")
			boundary, body := form(t, c.parts...)
			x := newExtras(dir, slog.Default())
			x.setBounds(c.maxBackups, c.maxSize, c.disk)
			err := receive(context.Background(), multipart.NewReader(bytes.NewReader(body), boundary), newFS(t, t.TempDir()), archive.ExtractOptions{}, x)
			if err == nil {
				err = x.commit(context.Background(), testServer, t.TempDir())
			}
			x.discard()
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("receive: %v, want %v", err, c.want)
			}
			entries, _ := os.ReadDir(dir)
			if c.want != nil && len(entries) != 0 {
				t.Fatalf("left in the backup directory: %v", entries)
			}
		})
	}
}

// FuzzIsTarGz: the header check of a received backup never panics and
// reads at most the gzip header and one tar block's worth of output.
func FuzzIsTarGz(f *testing.F) {
	f.Add(tarGz(f, []byte("x")))
	f.Add(gzipOf(f, []byte("x")))
	f.Add(gzipOf(f, make([]byte, 1<<20)))
	f.Add([]byte{0x1f, 0x8b, 8})
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = isTarGz(bytes.NewReader(b))
	})
}
