package files

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/isolate"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/testutil/tree"
	"github.com/wharf/wharf/internal/usererr"
)

// testWorker is the child when the test binary runs as one: args are
// "extract-worker" (the real worker) or "extract-worker-die-after N" (the
// worker, killed by SIGKILL when it announces its N+1th entry: a child that
// dies in the middle of an extraction, at a known point).
func testWorker(args []string) int {
	if len(args) == 2 && args[0] == WorkerCommand+"-die-after" {
		n, _ := strconv.Atoi(args[1])
		if err := isolate.Enter(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		j := &dyingJournal{w: os.NewFile(3, "journal"), left: n}
		if err := runExtractWorker(context.Background(), os.Stdin, os.Stdout, j, os.NewFile(5, "lease")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	if err := ExtractWorkerMain(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type dyingJournal struct {
	w    io.Writer
	left int
}

func (d *dyingJournal) Write(p []byte) (int, error) {
	if d.left == 0 {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	d.left--
	return d.w.Write(p)
}

func isolated(fsys *sandbox.FS, command ...string) *Manager {
	m := New(fsys)
	m.Isolation = &Isolation{
		Command: append([]string{os.Args[0]}, command...),
		Limits:  isolate.Limits{Memory: 512 << 20, CPU: time.Minute, Wall: time.Minute},
		UID:     -1, GID: -1,
		Denylist: []string{"*.secret"},
	}
	return m
}

func tarGz(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	mt := time.Date(2021, 2, 3, 4, 5, 6, 0, time.UTC)
	for i := range n {
		if i%10 == 0 {
			_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: fmt.Sprintf("d%d/", i/10), Mode: 0o750, ModTime: mt})
		}
		body := fmt.Sprintf("file %d\n", i)
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("d%d/f%d.txt", i/10, i), Mode: 0o640, Size: int64(len(body)), ModTime: mt})
		_, _ = tw.Write([]byte(body))
	}
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "d0/link", Linkname: "f0.txt", ModTime: mt})
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeLink, Name: "d0/hard", Linkname: "d0/f1.txt", ModTime: mt})
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "x.secret", Size: 1})
	_, _ = tw.Write([]byte("s"))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	_ = gz.Close()
	return buf.Bytes()
}

// A server root holding the user's own files, some in a directory the
// archive extracts into too.
func userRoot(t *testing.T, archive []byte) (string, *sandbox.FS) {
	t.Helper()
	root := t.TempDir()
	for name, body := range map[string]string{"a.tar.gz": string(archive), "own.txt": "own", "d3/mine.txt": "mine"} {
		_ = os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755)
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fsys, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1, Denylist: []string{"*.secret"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fsys.Close() })
	if _, err := fsys.RefreshUsage(context.Background()); err != nil {
		t.Fatal(err)
	}
	return root, fsys
}

// Through the child, an archive extracts to the same tree, with the same
// result, as in this process; the server's usage counts what it wrote.
func TestIsolatedDecompressMatchesInProcess(t *testing.T) {
	arc := tarGz(t, 100)
	here, hereFS := userRoot(t, arc)
	child, childFS := userRoot(t, arc)
	want, err := New(hereFS).Decompress(context.Background(), "/", "a.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	before := childFS.Usage()
	got, err := isolated(childFS, WorkerCommand).Decompress(context.Background(), "/", "a.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	if got != want || got.Files != 101 || got.Links != 1 || got.Skipped != 1 {
		t.Fatalf("result %+v through the child, %+v here", got, want)
	}
	a, _ := tree.Snapshot(here)
	b, _ := tree.Snapshot(child)
	if d := tree.Diff(a, b); d != "" {
		t.Fatal("trees differ:\n" + d)
	}
	if childFS.Usage() != hereFS.Usage() || childFS.Usage() <= before {
		t.Fatalf("usage %d through the child (%d before), %d here", childFS.Usage(), before, hereFS.Usage())
	}
}

// A child killed in the middle of an extraction: the daemon removes every
// entry it had made, and nothing of the user's (own.txt, d3/mine.txt, the
// directory d3 the archive merged into) goes with them.
func TestIsolatedDecompressKilledMidwayLeavesNothing(t *testing.T) {
	arc := tarGz(t, 100)
	for _, after := range []int{0, 1, 2, 37, 80} {
		root, fsys := userRoot(t, arc)
		want := snapshotNoDirTimes(t, root)
		_, err := isolated(fsys, WorkerCommand+"-die-after", strconv.Itoa(after)).Decompress(context.Background(), "/", "a.tar.gz")
		ue, ok := usererr.From(err)
		if !ok || ue.Kind != usererr.Invalid || ue.Message != "This archive could not be read: its decoder was killed by signal killed." {
			t.Fatalf("after %d: error %v", after, err)
		}
		if d := tree.Diff(want, snapshotNoDirTimes(t, root)); d != "" {
			t.Fatalf("after %d entries, the tree differs:\n%s", after, d)
		}
		// The server's usage is what is on disk again: what a fresh count
		// of the same tree finds.
		if after == 80 {
			fresh, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1})
			if err != nil {
				t.Fatal(err)
			}
			onDisk, err := fresh.RefreshUsage(context.Background())
			fresh.Close()
			if err != nil || fsys.Usage() != onDisk {
				t.Fatalf("usage %d, a fresh count finds %d (%v)", fsys.Usage(), onDisk, err)
			}
		}
	}
}

// snapshotNoDirTimes is tree.Snapshot without the times of directories
// (adding entries to a directory and removing them changes its time).
func snapshotNoDirTimes(t *testing.T, root string) map[string]string {
	s, err := tree.Snapshot(root)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range s {
		if strings.HasPrefix(v, "d") {
			s[k], _, _ = strings.Cut(v, " ")
		}
	}
	return s
}

// The 45-byte 7z bomb of issue 21 ends the child, not this process, and
// the error says the archive could not be read.
func TestIsolatedDecompressSevenZipBomb(t *testing.T) {
	bomb, _ := hex.DecodeString("377abcaf271c00049b638bb600000000000000000d00000000000000dd28ba2a0105ff00000000000200000000")
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "b.7z"), bomb, 0o644); err != nil {
		t.Fatal(err)
	}
	fsys, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	_, err = isolated(fsys, WorkerCommand).Decompress(context.Background(), "/", "b.7z")
	ue, ok := usererr.From(err)
	if !ok || ue.Kind != usererr.Invalid || ue.Message != "This archive could not be read: it needs more memory than the 512 MiB a decompression may use." {
		t.Fatalf("error %v", err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
}

// The user's errors of an extraction in the child reach the caller with
// their kind and message: a missing archive, a directory, an unknown
// format, the disk limit.
func TestIsolatedDecompressUserErrors(t *testing.T) {
	root, fsys := userRoot(t, tarGz(t, 100))
	_ = os.WriteFile(filepath.Join(root, "junk.zip"), []byte("not an archive"), 0o644)
	m := isolated(fsys, WorkerCommand)
	for _, c := range []struct {
		file string
		want error
	}{
		{"missing.zip", sandbox.ErrNotExist},
		{"d3", ErrIsDirectory},
		{"junk.zip", ErrUnknownFormat},
	} {
		_, err := m.Decompress(context.Background(), "/", c.file)
		got, ok := usererr.From(err)
		want, _ := usererr.From(c.want)
		if !ok || got.Kind != want.Kind || got.Message != want.Message {
			t.Errorf("%s: error %v, want %v", c.file, err, c.want)
		}
	}
	fsys.SetDiskLimit(fsys.Usage() + 100)
	_, err := m.Decompress(context.Background(), "/", "a.tar.gz")
	if got, ok := usererr.From(err); !ok || got.Message != ErrNoSpace.Message {
		t.Fatalf("no space: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "d0")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("d0 left after running out of space: %v", err)
	}
}

// Decompressions run together (file jobs are shared): each child writes
// within what it reserved of the server's limit, so that together they
// cannot end past it, as one count shared in this process guaranteed.
func TestIsolatedDecompressionsTogetherKeepTheLimit(t *testing.T) {
	root := t.TempDir()
	body := bytes.Repeat([]byte("z"), 600<<10)
	for i := range 4 {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: fmt.Sprintf("f%d.bin", i), Method: zip.Store})
		_, _ = w.Write(body)
		_ = zw.Close()
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("a%d.zip", i)), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fsys, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	used, _ := fsys.RefreshUsage(context.Background())
	limit := used + 1<<20 // room for one of the four
	fsys.SetDiskLimit(limit)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			_, err := isolated(fsys, WorkerCommand).Decompress(context.Background(), "/", fmt.Sprintf("a%d.zip", i))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		if err == nil {
			ok++
		} else if ue, _ := usererr.From(err); ue == nil || ue.Message != ErrNoSpace.Message {
			t.Fatalf("error %v", err)
		}
	}
	disk, _ := fsys.RefreshUsage(context.Background())
	if ok == 0 || disk > limit {
		t.Fatalf("%d of 4 extracted, %d bytes on disk for a limit of %d", ok, disk, limit)
	}
}
