package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/wharf/wharf/internal/sandbox"
)

func inodeAt(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// A truncating restore by Prune then Extract ends exactly as one into an
// emptied directory, whatever was in the way, and rewrites the files the
// archive has again in place.
func TestPruneThenExtractIsATruncatingRestore(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	buildTree(t, src)
	data, _ := writeArchive(t, newFS(t, src), WriteOptions{Manifest: true})
	dst := filepath.Join(base, "dst")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(base, "outside")
	must(os.WriteFile(outside, []byte("host file"), 0o644))
	// What a game leaves: extra files and directories, a link where a file
	// goes (to outside), a directory where a file goes, a file where a
	// directory goes, a FIFO, and two names of one file the archive has
	// as two different files.
	must(os.WriteFile(filepath.Join(dst, "extra.txt"), []byte("x"), 0o644))
	must(os.MkdirAll(filepath.Join(dst, "world", "new", "deeper"), 0o755))
	must(os.WriteFile(filepath.Join(dst, "world", "new", "deeper", "f"), []byte("x"), 0o644))
	must(os.Remove(filepath.Join(dst, "plugins.jar")))
	must(os.Symlink(outside, filepath.Join(dst, "plugins.jar")))
	must(os.Remove(filepath.Join(dst, "run.sh")))
	must(os.MkdirAll(filepath.Join(dst, "run.sh", "x"), 0o755))
	must(os.RemoveAll(filepath.Join(dst, "empty")))
	must(os.WriteFile(filepath.Join(dst, "empty"), []byte("not a dir"), 0o644))
	must(syscall.Mkfifo(filepath.Join(dst, "logs", "latest.log.fifo"), 0o644))
	must(os.Remove(filepath.Join(dst, "logs", "latest.log")))
	must(os.Link(filepath.Join(dst, "server.properties"), filepath.Join(dst, "logs", "latest.log")))
	kept := inodeAt(t, filepath.Join(dst, "world", "level.dat"))

	names, err := ListNames(context.Background(), bytes.NewReader(data), ExtractOptions{})
	must(err)
	fsys := newFS(t, dst)
	must(Prune(context.Background(), fsys, names))
	res, err := Extract(context.Background(), bytes.NewReader(data), fsys, ExtractOptions{})
	must(err)
	if !res.Verified {
		t.Fatal("the integrity entry was not checked")
	}
	// The entries first: a FIFO left behind would block the snapshot.
	if diff := cmp.Diff(entryTypes(t, src), entryTypes(t, dst)); diff != "" {
		t.Fatalf("restored entries differ (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(snapshot(t, src), snapshot(t, dst)); diff != "" {
		t.Fatalf("restored tree differs (-want +got):\n%s", diff)
	}
	if got, _ := os.ReadFile(outside); string(got) != "host file" {
		t.Fatalf("written through a link: %q", got)
	}
	if inodeAt(t, filepath.Join(dst, "world", "level.dat")) != kept {
		t.Fatal("a file the archive has again was made anew instead of rewritten")
	}
}

// entryTypes lists the entries below root with their types, opening none.
func entryTypes(t *testing.T, root string) map[string]fs.FileMode {
	t.Helper()
	out := map[string]fs.FileMode{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			out[strings.TrimPrefix(p, root)] = d.Type()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestListNames(t *testing.T) {
	fifo := &tar.Header{Typeflag: tar.TypeFifo, Name: "pipe"}
	link := &tar.Header{Typeflag: tar.TypeSymlink, Name: "a/l", Linkname: "b"}
	data := tarGz(t,
		reg("a/b/c.txt"), "c",
		fifo, "",
		link, "",
		reg("../up"), "x",
		reg("x"), "file first",
		&tar.Header{Typeflag: tar.TypeDir, Name: "x/"}, "",
		reg(ManifestName), "",
	)
	n, err := ListNames(context.Background(), bytes.NewReader(data), ExtractOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]nameKind{"a": kindDir, "a/b": kindDir, "a/b/c.txt": kindFile, "a/l": kindOther, "x": kindDir}
	if diff := cmp.Diff(want, n.kinds); diff != "" {
		t.Fatalf("names (-want +got):\n%s", diff)
	}
	// Without an integrity entry, a root file of that name is the server's.
	n, err = ListNames(context.Background(), bytes.NewReader(data), ExtractOptions{NoManifest: true})
	if err != nil {
		t.Fatal(err)
	}
	if n.kinds[ManifestName] != kindFile {
		t.Fatalf("%s left out of a bare stream: %v", ManifestName, n.kinds)
	}
}

func TestListNamesBrokenAndTooMany(t *testing.T) {
	data := tarGz(t, reg("a"), "aaaa", reg("b"), "bbbb")
	_, err := ListNames(context.Background(), bytes.NewReader(data[:len(data)-12]), ExtractOptions{})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("cut stream: %v, want ErrCorrupt", err)
	}
	// The reader's own error stays visible under ErrCorrupt.
	mine := errors.New("chunk 7 damaged")
	_, err = ListNames(context.Background(), io.MultiReader(bytes.NewReader(data[:100]), errReader{mine}), ExtractOptions{})
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, mine) {
		t.Fatalf("reader error: %v", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := range maxNames + 1 {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "d" + strconv.Itoa(i) + "/", Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	n, err := ListNames(context.Background(), &buf, ExtractOptions{Plain: true})
	if err != nil || n != nil {
		t.Fatalf("too many names: %v, %v; want nil names and no error", n != nil, err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// A file written over in place is charged for what it allocates, even
// where it lies over the holes of a sparse file the game left in its
// place (its apparent size is no allowance): with a 1 MiB limit, a 2 MiB
// file of the archive written over a 1 GiB sparse file stops at the limit.
func TestExtractOverASparseFileKeepsTheDiskLimit(t *testing.T) {
	base := t.TempDir()
	data := tarGz(t, reg("world.dat"), strings.Repeat("w", 2<<20))
	dst := filepath.Join(base, "dst")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	sparse, err := os.Create(filepath.Join(dst, "world.dat"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sparse.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	sparse.Close()
	root, err := sandbox.New(dst, sandbox.Options{UID: -1, GID: -1, DiskLimit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.RefreshUsage(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = Extract(context.Background(), bytes.NewReader(data), root.Trusted(), ExtractOptions{})
	if !errors.Is(err, sandbox.ErrNoSpace) {
		t.Fatalf("extract over a sparse file: %v, want ErrNoSpace", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dst, "world.dat"), &st); err != nil {
		t.Fatal(err)
	}
	if got := st.Blocks * 512; got > 1<<20+64<<10 {
		t.Fatalf("%d bytes allocated past a 1 MiB limit", got)
	}
}
