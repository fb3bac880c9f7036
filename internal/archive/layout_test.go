package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// wingsRestore reproduces Wings' restore algorithm (wings-facts §7.3): read
// the tar.gz with Go's archive/tar until it reports the end, and write every
// entry, whatever its type, as a regular file with the entry's mode and
// size (parents created 0755, a file truncated when it exists), then set
// its access and modification times to the entry's mtime. It stops at the
// first error, as Wings does.
func wingsRestore(data []byte, root string) error {
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, fs.FileMode(h.Mode).Perm())
		if err != nil {
			return err
		}
		_, err = io.CopyN(f, tr, h.Size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := os.Chtimes(p, h.ModTime, h.ModTime); err != nil {
			return err
		}
	}
}

// regularFiles keeps the regular files of a snapshot.
func regularFiles(snap map[string]string) map[string]string {
	out := map[string]string{}
	for name, desc := range snap {
		if strings.HasPrefix(desc, "-") {
			out[name] = desc
		}
	}
	return out
}

// backupOptions are the options internal/backup writes with.
func backupOptions() WriteOptions {
	return WriteOptions{Level: LevelBestSpeed, Manifest: true, TreeTrailer: true, Hash: sha1.New}
}

// TestBackupLayoutRestoresOnWingsAndWharf proves both directions of a
// switch: a Wharf backup restored by Wings' algorithm keeps every regular
// file (contents, mode, mtime) and adds nothing, and restored by Wharf keeps
// the exact tree.
func TestBackupLayoutRestoresOnWingsAndWharf(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	buildTree(t, src)
	want := snapshot(t, src)
	data, res := writeArchive(t, newFS(t, src), backupOptions())
	sum := sha1.Sum(data)
	if res.Sum != hex.EncodeToString(sum[:]) || res.Size != int64(len(data)) {
		t.Fatalf("result %+v does not describe the %d bytes written", res, len(data))
	}
	if res.Files != 8 || res.Symlinks != 3 || res.Dirs != 5 {
		t.Fatalf("result %+v", res)
	}

	// What Go's tar reader (Wings) sees: regular files only.
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg || h.Name == ManifestName {
			t.Fatalf("entry %q (type %c) before the end-of-archive marker", h.Name, h.Typeflag)
		}
	}

	t.Run("wings", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "srv")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := wingsRestore(data, dst); err != nil {
			t.Fatalf("Wings' restore failed: %v", err)
		}
		got := snapshot(t, dst)
		if diff := cmp.Diff(regularFiles(want), regularFiles(got)); diff != "" {
			t.Fatalf("files restored by Wings differ (-want +got):\n%s", diff)
		}
		for name, desc := range got {
			if !strings.HasPrefix(desc, "-") && !strings.HasPrefix(desc, "d") {
				t.Fatalf("Wings made %s: %s", name, desc)
			}
			if strings.HasPrefix(desc, "d") && !strings.HasPrefix(want[name], "d") {
				t.Fatalf("Wings made a directory %s that the tree does not have", name)
			}
		}
	})

	t.Run("wharf", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "srv")
		xr, err := Extract(context.Background(), bytes.NewReader(data), newFS(t, dst), ExtractOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !xr.Verified || xr.Files != 8 || xr.Symlinks != 3 || xr.Dirs != 5 {
			t.Fatalf("extract result %+v", xr)
		}
		if diff := cmp.Diff(want, snapshot(t, dst)); diff != "" {
			t.Fatalf("restored tree differs (-want +got):\n%s", diff)
		}
		if err := Check(context.Background(), bytes.NewReader(data)); err != nil {
			t.Fatalf("Check: %v", err)
		}
	})

	t.Run("gnu-tar", func(t *testing.T) {
		tarBin, err := exec.LookPath("tar")
		if err != nil {
			t.Fatal("GNU tar is needed by this test (apt-get install tar)")
		}
		dir := t.TempDir()
		archive := filepath.Join(dir, "b.tar.gz")
		if err := os.WriteFile(archive, data, 0o600); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, "out")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd := exec.Command(tarBin, "-xzf", archive, "-C", dst)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Fatalf("tar -xzf: %v: %s", err, stderr.String())
		}
		if diff := cmp.Diff(regularFiles(want), regularFiles(snapshot(t, dst))); diff != "" {
			t.Fatalf("files extracted by GNU tar differ (-want +got):\n%s", diff)
		}
	})
}

// TestOldLayoutFailsOnWings shows what the tree trailer fixes: the layout
// with directory, link and integrity entries in the tar stream, which Wharf
// still restores, breaks Wings' restore.
func TestOldLayoutFailsOnWings(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	buildTree(t, src)
	data, _ := writeArchive(t, newFS(t, src), WriteOptions{Level: LevelBestSpeed, Manifest: true})
	dst := t.TempDir()
	err := wingsRestore(data, dst)
	if err == nil {
		if _, serr := os.Stat(filepath.Join(dst, ManifestName)); serr != nil {
			t.Fatal("the old layout restored on Wings without error or extra file: the algorithm is not Wings'")
		}
	}
	// Wharf keeps restoring backups made before the layout changed.
	dst2 := filepath.Join(t.TempDir(), "srv")
	xr, err := Extract(context.Background(), bytes.NewReader(data), newFS(t, dst2), ExtractOptions{})
	if err != nil || !xr.Verified {
		t.Fatalf("old layout: %+v %v", xr, err)
	}
	if diff := cmp.Diff(snapshot(t, src), snapshot(t, dst2)); diff != "" {
		t.Fatalf("restored tree differs (-want +got):\n%s", diff)
	}
}

// TestExtractWingsArchive restores an archive made as Wings makes a backup:
// Go's tar writer, files and links only, no directory entries, no integrity
// entry.
func TestExtractWingsArchive(t *testing.T) {
	data := tarGz(t,
		&tar.Header{Typeflag: tar.TypeReg, Name: "world/region/r.0.mca", Mode: 0o644, ModTime: mtime}, "chunk",
		&tar.Header{Typeflag: tar.TypeReg, Name: "start.sh", Mode: 0o755, ModTime: mtime}, "#!/bin/sh\n",
		&tar.Header{Typeflag: tar.TypeSymlink, Name: "latest", Linkname: "world", ModTime: mtime}, "",
	)
	dst := filepath.Join(t.TempDir(), "srv")
	xr, err := Extract(context.Background(), bytes.NewReader(data), newFS(t, dst), ExtractOptions{})
	if err != nil || xr.Verified || xr.Files != 2 || xr.Symlinks != 1 {
		t.Fatalf("%+v %v", xr, err)
	}
	got := snapshot(t, dst)
	stamp := mtime.Format("2006-01-02T15:04:05Z")
	for name, prefix := range map[string]string{
		"world/region/r.0.mca": "-rw-r--r-- " + stamp + " 5 ",
		"start.sh":             "-rwxr-xr-x " + stamp + " 10 ",
		"latest":               "Lrwxrwxrwx -> world",
		"world":                "drwxr-xr-x",
	} {
		if !strings.HasPrefix(got[name], prefix) {
			t.Fatalf("%s = %q, want %q...", name, got[name], prefix)
		}
	}
}

// twoStreams builds gzip(tar(files) ++ tar(trailer)).
func twoStreams(t *testing.T, files, trailer []any) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	for _, ents := range [][]any{files, trailer} {
		tw := tar.NewWriter(gz)
		for i := 0; i < len(ents); i += 2 {
			h := ents[i].(*tar.Header)
			body := ents[i+1].(string)
			if h.Typeflag == tar.TypeReg {
				h.Size = int64(len(body))
			}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(tw, body); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestTrailerIsCheckedLikeTheStream: entries of the trailer get the same
// confinement and the integrity entry must come last.
func TestTrailerIsCheckedLikeTheStream(t *testing.T) {
	link := &tar.Header{Typeflag: tar.TypeSymlink, Name: "lnk", Linkname: "../outside"}
	data := twoStreams(t, nil, []any{link, "", reg("lnk/escaped.txt"), "pwned"})
	base := t.TempDir()
	_, err := Extract(context.Background(), bytes.NewReader(data), newFS(t, filepath.Join(base, "srv")), ExtractOptions{})
	if !errors.Is(err, ErrUnsafeEntry) {
		t.Fatalf("err = %v, want ErrUnsafeEntry", err)
	}
	if _, err := os.Stat(filepath.Join(base, "outside", "escaped.txt")); err == nil {
		t.Fatal("written outside the root")
	}
	data = twoStreams(t, []any{reg("a.txt"), "hello"}, []any{reg(ManifestName), manifestLine(sha1Of("hello"), "a.txt"), reg("late.txt"), "x"})
	_, err = Extract(context.Background(), bytes.NewReader(data), newFS(t, t.TempDir()), ExtractOptions{})
	if !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("entry after the integrity entry: err = %v", err)
	}
	data = twoStreams(t, []any{reg("a.txt"), "hello"}, []any{reg(ManifestName), manifestLine(sha1Of("bye"), "a.txt")})
	_, err = Extract(context.Background(), bytes.NewReader(data), newFS(t, t.TempDir()), ExtractOptions{})
	if !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("wrong checksum in the trailer: err = %v", err)
	}
}

func sha1Of(s string) []byte {
	h := sha1.Sum([]byte(s))
	return h[:]
}

// TestTrailerCorruptAndTruncated cuts a trailer-layout archive at points
// inside the trailer, and pads a Wings archive as GNU tar pads its records.
func TestTrailerCorruptAndTruncated(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	buildTree(t, src)
	opts := backupOptions()
	opts.Level = LevelNone
	data, _ := writeArchive(t, newFS(t, src), opts)
	for _, cut := range []int{len(data) - 4, len(data) - 600, len(data) - 1100} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			_, err := Extract(context.Background(), bytes.NewReader(data[:cut]), newFS(t, t.TempDir()), ExtractOptions{})
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrChecksumMismatch) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if err := Check(context.Background(), bytes.NewReader(data[:cut])); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Check: err = %v, want ErrCorrupt", err)
			}
		})
	}
	// Zero padding after the marker (a record-padded tar, odd block count
	// or less than a block) is not a trailer.
	for _, pad := range []int{512 * 17, 512 * 18, 100} {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "a", Mode: 0o644, Size: 1})
		_, _ = tw.Write([]byte("x"))
		_ = tw.Close()
		_, _ = gz.Write(make([]byte, pad))
		_ = gz.Close()
		xr, err := Extract(context.Background(), bytes.NewReader(buf.Bytes()), newFS(t, t.TempDir()), ExtractOptions{})
		if err != nil || xr.Files != 1 {
			t.Fatalf("padding %d: %+v %v", pad, xr, err)
		}
	}
}

// TestTrailerSpillsToDisk writes a trailer larger than the in-memory spool.
func TestTrailerSpillsToDisk(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	// 3000 directories whose names are long enough for a PAX record:
	// three 512-byte blocks each, over the 4 MiB kept in memory.
	long := strings.Repeat("x", 110)
	for i := range 3000 {
		if err := os.MkdirAll(filepath.Join(src, fmt.Sprintf("d%03d", i%100), fmt.Sprintf("%s%04d", long, i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "d000", "f"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := backupOptions()
	opts.TempDir = t.TempDir()
	data, res := writeArchive(t, newFS(t, src), opts)
	if res.Dirs != 3100 || res.Files != 1 {
		t.Fatalf("%+v", res)
	}
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := io.Copy(io.Discard, gz); n < spoolMemory+4096 {
		t.Fatalf("only %d bytes uncompressed: the trailer did not outgrow memory", n)
	}
	dst := filepath.Join(t.TempDir(), "srv")
	xr, err := Extract(context.Background(), bytes.NewReader(data), newFS(t, dst), ExtractOptions{})
	if err != nil || !xr.Verified || xr.Dirs != 3100 {
		t.Fatalf("%+v %v", xr, err)
	}
	if diff := cmp.Diff(snapshot(t, src), snapshot(t, dst)); diff != "" {
		t.Fatalf("restored tree differs (-want +got):\n%s", diff)
	}
	// GNU tar, reading through gzip, stops at the marker without
	// complaining about the megabytes that follow it.
	archive := filepath.Join(t.TempDir(), "b.tar.gz")
	if err := os.WriteFile(archive, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("tar", "-tzf", archive).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "d000/f" {
		t.Fatalf("tar -tzf: %v\n%.500s", err, out)
	}
}
