package files

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/testutil/bench"
	"github.com/wharf/wharf/internal/testutil/tree"
	"go.uber.org/goleak"
)

// The benchmark tree: tree.GameServer of about WHARF_BENCH_TREE_MB MiB
// (1024 by default), made once per run.
var (
	benchOnce  sync.Once
	benchDir   string
	benchBytes int64
	benchErr   error
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], WorkerCommand) {
		os.Exit(testWorker(os.Args[1:])) // the test binary as the isolated child
	}
	// The run fails when a test leaves a goroutine behind.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if benchDir != "" {
			_ = os.RemoveAll(benchDir)
		}
		os.Exit(code)
	}))
}

func benchTree(b *testing.B) (string, int64) {
	b.Helper()
	benchOnce.Do(func() {
		mb := int64(1024)
		if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
			mb = int64(v)
		}
		benchDir, benchErr = os.MkdirTemp("", "wharf-files-bench-")
		if benchErr == nil {
			benchBytes, benchErr = tree.GameServer(filepath.Join(benchDir, "src"), mb<<20)
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return filepath.Join(benchDir, "src"), benchBytes
}

// userFS opens root as a user's sandbox (not the trusted view), with a
// denylist, as the file manager sees it.
func userFS(b *testing.B, root string) *sandbox.FS {
	b.Helper()
	f, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1, Denylist: []string{"*.secret"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// BenchmarkListDirectory: List of a directory of 10,000 files (configs,
// logs, jars, binaries, files without extension), next to a plain Go loop
// doing the same work: read the directory, lstat each entry, read the head
// of each regular file and type it with http.DetectContentType.
func BenchmarkListDirectory(b *testing.B) {
	dir := b.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	exts := []string{".yml", ".log", ".jar", ".dat", "", ".json", ".mca", ".properties"}
	head := make([]byte, 4096)
	for i := range 10000 {
		for j := range head {
			head[j] = byte(rng.IntN(256))
		}
		ext := exts[i%len(exts)]
		data := head[:512+rng.IntN(3000)]
		switch ext {
		case ".yml", ".log", ".json", ".properties", "":
			data = []byte(fmt.Sprintf("key-%d: value\n", i))
		case ".jar":
			data = append([]byte("PK\x03\x04"), data...)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("file-%05d%s", i, ext)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 20 {
		_ = os.Mkdir(filepath.Join(dir, fmt.Sprintf("dir-%02d", i)), 0o755)
	}
	m := New(userFS(b, dir))
	bench.Paired(b, 10020, func() func() {
		out, err := m.List("/")
		if err != nil || len(out) != 10020 {
			b.Fatal(err, len(out))
		}
		return nil
	}, func() func() {
		if n := plainList(b, dir); n != 10020 {
			b.Fatal(n)
		}
		return nil
	})
}

func plainList(b *testing.B, dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 512)
	n := 0
	for _, e := range entries {
		fi, err := os.Lstat(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		mime := "inode/directory"
		if fi.Mode().IsRegular() {
			f, err := os.Open(filepath.Join(dir, e.Name()))
			if err != nil {
				continue
			}
			k, _ := f.Read(buf)
			f.Close()
			mime = http.DetectContentType(buf[:k])
		}
		_ = mime
		n++
	}
	return n
}

// BenchmarkCompress: Compress of the whole tree as tar.gz, next to backup
// creation (archive.Write of the same tree into a file).
func BenchmarkCompress(b *testing.B) {
	src, total := benchTree(b)
	m := New(userFS(b, src))
	m.Level = archive.LevelBestSpeed
	ref := tree.Open(b, src)
	out := filepath.Join(benchDir, "backup.tar.gz")
	bench.Paired(b, total, func() func() {
		st, err := m.Compress(context.Background(), CompressRequest{Root: "/", Files: []string{"."}, Name: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		return func() { os.Remove(filepath.Join(src, st.Name)) }
	}, func() func() {
		f, _ := os.Create(out)
		if _, err := archive.Write(context.Background(), f, ref, archive.WriteOptions{Level: archive.LevelBestSpeed}); err != nil {
			b.Fatal(err)
		}
		f.Close()
		return func() { os.Remove(out) }
	})
}

// benchArchive makes an archive of the tree once: ext is tar.gz or zip.
func benchArchive(b *testing.B, ext string) string {
	src, _ := benchTree(b)
	p := filepath.Join(benchDir, "bench."+ext)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	m := New(userFS(b, src))
	m.Level = archive.LevelBestSpeed
	st, err := m.Compress(context.Background(), CompressRequest{Root: "/", Files: []string{"."}, Name: "made", Extension: ext})
	if err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(filepath.Join(src, st.Name), p); err != nil {
		b.Fatal(err)
	}
	return p
}

// benchDecompress: Decompress into an empty server next to a command
// extracting the same archive into an empty directory.
func benchDecompress(b *testing.B, ext string, ref func(arc, dst string) *exec.Cmd) {
	src, total := benchTree(b)
	arc := benchArchive(b, ext)
	i := 0
	bench.Paired(b, total, func() func() {
		dst := filepath.Join(benchDir, "ours-"+strconv.Itoa(i))
		i++
		_ = os.MkdirAll(dst, 0o755)
		if err := os.Link(arc, filepath.Join(dst, "a."+ext)); err != nil {
			b.Fatal(err)
		}
		m := New(userFS(b, dst))
		if _, err := m.Decompress(context.Background(), "/", "a."+ext); err != nil {
			b.Fatal(err)
		}
		return func() {
			if i == 1 {
				_ = os.Remove(filepath.Join(dst, "a."+ext))
				compareTrees(b, src, dst)
			}
			os.RemoveAll(dst)
		}
	}, func() func() {
		dst := filepath.Join(benchDir, "ref")
		_ = os.MkdirAll(dst, 0o755)
		if out, err := ref(arc, dst).CombinedOutput(); err != nil {
			b.Fatal(err, string(out))
		}
		return func() { os.RemoveAll(dst) }
	})
}

func compareTrees(b *testing.B, src, dst string) {
	want, err := tree.Snapshot(src)
	if err != nil {
		b.Fatal(err)
	}
	got, err := tree.Snapshot(dst)
	if err != nil {
		b.Fatal(err)
	}
	if d := tree.Diff(want, got); d != "" {
		b.Fatal("extracted tree differs:\n" + d)
	}
}

// BenchmarkDecompressTarGz: next to `tar -xzf`.
func BenchmarkDecompressTarGz(b *testing.B) {
	benchDecompress(b, "tar.gz", func(arc, dst string) *exec.Cmd { return exec.Command("tar", "-xzf", arc, "-C", dst) })
}

// BenchmarkDecompressZip: next to `unzip`.
func BenchmarkDecompressZip(b *testing.B) {
	benchDecompress(b, "zip", func(arc, dst string) *exec.Cmd { return exec.Command("unzip", "-q", arc, "-d", dst) })
}
