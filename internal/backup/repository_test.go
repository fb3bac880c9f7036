package backup

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// repoService is a Service writing to a repository under dir, reporting
// the files each repository backup read.
func repoService(t *testing.T, dir string, read *[]string) *Service {
	t.Helper()
	c := config.Defaults()
	c.System.BackupDirectory = filepath.Join(dir, "backups")
	c.System.TmpDirectory = filepath.Join(dir, "tmp")
	os.MkdirAll(c.System.TmpDirectory, 0o700)
	svc := New(context.Background(), config.NewStore(filepath.Join(dir, "config.yml"), c), nil, slog.New(slog.DiscardHandler))
	t.Cleanup(svc.Close)
	svc.repoFilesRead = func(files []string) { *read = slices.Clone(files) }
	return svc
}

func writeTree(t *testing.T, root string, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func randomData(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// readTree maps each regular file under root to its content.
func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(root, p)
			out[rel] = string(b)
		}
		return nil
	})
	return out
}

// TestRepositoryBackupReadsOnlyChangedFiles: a repository backup after a
// change reads only the files whose stat changed (a rename over a file
// with the same size and mtime included), and restores to the changed tree.
func TestRepositoryBackupReadsOnlyChangedFiles(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "srv")
	writeTree(t, root, map[string][]byte{
		"a.txt":            []byte("first a"),
		"c.txt":            []byte("cccc"),
		"sub/big.bin":      randomData(3 << 20),
		"sub/deep/x.dat":   randomData(70 << 10),
		"world/region.mca": randomData(600 << 10),
	})
	os.Symlink("sub/big.bin", filepath.Join(root, "link"))
	os.MkdirAll(filepath.Join(root, "empty"), 0o755)
	srv := benchServer{tree.Open(t, root)}
	var read []string
	svc := repoService(t, dir, &read)
	ctx := context.Background()

	d1, err := svc.createRepository(ctx, srv, "b1", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != 5 {
		t.Fatalf("first backup read %v", read)
	}

	// One file changed: only it is read.
	writeTree(t, root, map[string][]byte{"a.txt": []byte("second a, longer")})
	d2, err := svc.createRepository(ctx, srv, "b2", "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(read, []string{"a.txt"}) {
		t.Fatalf("second backup read %v, want only a.txt", read)
	}
	if d1.Checksum == d2.Checksum || d2.Size != d1.Size {
		t.Fatalf("checksums %s %s, sizes %d %d", d1.Checksum, d2.Checksum, d1.Size, d2.Size)
	}

	// Same size and mtime, new inode (renamed over it): read again.
	c := filepath.Join(root, "c.txt")
	fi, _ := os.Stat(c)
	tmp := filepath.Join(root, "c.tmp")
	os.WriteFile(tmp, []byte("dddd"), 0o644)
	os.Chtimes(tmp, fi.ModTime(), fi.ModTime())
	if err := os.Rename(tmp, c); err != nil {
		t.Fatal(err)
	}
	d3, err := svc.createRepository(ctx, srv, "b3", "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(read, []string{"c.txt"}) {
		t.Fatalf("third backup read %v, want only c.txt", read)
	}

	// Nothing changed: nothing read, same stream as the third.
	d4, err := svc.createRepository(ctx, srv, "b4", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != 0 {
		t.Fatalf("fourth backup read %v", read)
	}
	// The integrity entry's time may differ by a second, nothing else.
	if d4.Size != d3.Size {
		t.Fatalf("sizes %d %d", d3.Size, d4.Size)
	}

	// The third backup restores to the changed tree exactly, through the
	// archive extractor (integrity entry checked).
	want := readTree(t, root)
	st, m, err := svc.repoManifest(svc.cfg.Get(), "bench", "b3")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	os.MkdirAll(out, 0o755)
	rd := gzipStream(ctx, st, m, archive.LevelBestSpeed, t.TempDir())
	defer rd.Close()
	res, err := archive.Extract(ctx, rd, tree.Open(t, out), archive.ExtractOptions{})
	if err != nil || !res.Verified {
		t.Fatalf("extract: %v, integrity entry verified: %v", err, res.Verified)
	}
	got := readTree(t, out)
	if len(got) != len(want) {
		t.Fatalf("restored %d files, want %d", len(got), len(want))
	}
	for name, b := range want {
		if got[name] != b {
			t.Fatalf("%s differs after restore", name)
		}
	}
	if l, _ := os.Readlink(filepath.Join(out, "link")); l != "sub/big.bin" {
		t.Fatalf("link = %q", l)
	}
	if fi, err := os.Stat(filepath.Join(out, "empty")); err != nil || !fi.IsDir() {
		t.Fatal("empty directory not restored")
	}
	ofi, _ := os.Stat(filepath.Join(out, "c.txt"))
	if !ofi.ModTime().Equal(fi.ModTime().Truncate(time.Second)) {
		t.Fatalf("c.txt mtime %v, want %v", ofi.ModTime(), fi.ModTime())
	}
}

// InRepository finds a repository backup of its server only, and the
// stream OpenRepositoryStream opens is the signed download's bytes and
// ends with its context (a cancelled transfer that sends it).
func TestRepositoryStreamForTransfers(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "srv")
	writeTree(t, root, map[string][]byte{"a.txt": []byte("a"), "sub/b.bin": randomData(2 << 20)})
	srv := benchServer{tree.Open(t, root)}
	var read []string
	svc := repoService(t, dir, &read)
	if _, err := svc.createRepository(context.Background(), srv, "b1", ""); err != nil {
		t.Fatal(err)
	}
	if err := svc.InRepository(srv.UUID(), "b1"); err != nil {
		t.Fatalf("InRepository: %v", err)
	}
	if err := svc.InRepository(srv.UUID(), "b2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("InRepository of a backup not there: %v", err)
	}
	if err := svc.InRepository("another-server", "b1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("InRepository of another server's backup: %v", err)
	}
	readAll := func(ctx context.Context) ([]byte, error) {
		rc, err := svc.OpenRepositoryStream(ctx, srv.UUID(), "b1")
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	download, err := svc.OpenRepositoryDownload(context.Background(), srv.UUID(), "b1")
	if err != nil {
		t.Fatal(err)
	}
	want, err := io.ReadAll(download)
	download.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(context.Background()); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the stream is not the download's bytes: %v (%d bytes, want %d)", err, len(got), len(want))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := readAll(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a stream whose context ended: %v", err)
	}
}

// Empty files (issue 33 item 4) are not segments, chunks and index
// entries of their own: their headers (from the walk's lstat, the files
// are not opened) are chunked together and left out of the file index,
// the next backup writes them again (found in the repository: the store
// does not grow), and a restore gives them back exactly.
func TestRepositoryEmptyFilesShareChunks(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "srv")
	files := map[string][]byte{"a.txt": []byte("some a"), "sub/big.bin": randomData(1 << 20)}
	const empties = 3000
	for i := range empties {
		files[fmt.Sprintf("junk/%02d/e%05d", i%30, i)] = nil
	}
	writeTree(t, root, files)
	srv := benchServer{tree.Open(t, root)}
	var read []string
	svc := repoService(t, dir, &read)
	ctx := context.Background()
	if _, err := svc.createRepository(ctx, srv, "b1", ""); err != nil {
		t.Fatal(err)
	}
	// Not even opened: their headers come from the walk's lstat.
	if len(read) != 2 {
		t.Fatalf("first backup read %d files, want 2", len(read))
	}
	st, m, err := svc.repoManifest(svc.cfg.Get(), "bench", "b1")
	if err != nil {
		t.Fatal(err)
	}
	// Control: the headers alone are 1.5 MB, a chunk each before.
	if len(m.Files) != 2 || len(m.Chunks) > 40 {
		t.Fatalf("%d files indexed, %d chunks: want 2 indexed and the empty files' headers in few chunks", len(m.Files), len(m.Chunks))
	}
	usage := func() int64 { // the packs' bytes
		var n int64
		filepath.WalkDir(filepath.Join(dir, "backups", ".repository", "packs"), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					n += fi.Size()
				}
			}
			return nil
		})
		return n
	}
	before := usage()
	if before == 0 {
		t.Fatal("control: no packs found")
	}
	if _, err := svc.createRepository(ctx, srv, "b2", ""); err != nil {
		t.Fatal(err)
	}
	// The unchanged non-empty files are reused, the empty ones' headers
	// written again: the same bytes, so no new blob.
	if len(read) != 0 {
		t.Fatalf("second backup read %d files, want none", len(read))
	}
	if grow := usage() - before; grow > 4<<10 {
		t.Fatalf("second backup grew the repository by %d bytes", grow)
	}
	_, m2, err := svc.repoManifest(svc.cfg.Get(), "bench", "b2")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	os.MkdirAll(out, 0o755)
	rd := gzipStream(ctx, st, m2, archive.LevelBestSpeed, t.TempDir())
	defer rd.Close()
	if res, err := archive.Extract(ctx, rd, tree.Open(t, out), archive.ExtractOptions{}); err != nil || !res.Verified {
		t.Fatalf("extract: %v, integrity entry verified: %v", err, res.Verified)
	}
	want, got := readTree(t, root), readTree(t, out)
	if len(got) != len(want) {
		t.Fatalf("restored %d files, want %d", len(got), len(want))
	}
	for name, b := range want {
		if g, ok := got[name]; !ok || g != b {
			t.Fatalf("%s differs after restore", name)
		}
	}
}
