package archive

import (
	"archive/tar"
	"bufio"
	"context"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/klauspost/pgzip"
	"go.uber.org/goleak"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/testutil/bench"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// The benchmark tree: tree.GameServer of about WHARF_BENCH_TREE_MB MiB
// (1024 by default), made once per run.
var (
	benchOnce  sync.Once
	benchDir   string
	benchBytes int64
	benchErr   error
)

// TestMain removes the benchmark tree and fails the package when a test
// leaves a goroutine behind (a compressor or decompressor not ended).
func TestMain(m *testing.M) {
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
		benchDir, benchErr = os.MkdirTemp("", "wharf-bench-")
		if benchErr == nil {
			benchBytes, benchErr = tree.GameServer(filepath.Join(benchDir, "src"), mb<<20)
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return filepath.Join(benchDir, "src"), benchBytes
}

func benchFS(b *testing.B, root string) *sandbox.FS { return tree.Open(b, root) }

// BenchmarkBackupCreate: archive.Write of the tree into a file, next to
// the ceiling for create: a minimal archive/tar + pgzip level 1 on all
// cores into a file, nothing else.
func BenchmarkBackupCreate(b *testing.B) {
	src, total := benchTree(b)
	fsys := benchFS(b, src)
	out := filepath.Join(benchDir, "create.tar.gz")
	bench.Paired(b, total, func() func() {
		f, _ := os.Create(out)
		// Unbuffered, as backups are written: pgzip hands over whole blocks.
		if _, err := Write(context.Background(), f, fsys, WriteOptions{Level: LevelBestSpeed, Manifest: true, TempDir: benchDir}); err != nil {
			b.Fatal(err)
		}
		f.Close()
		return nil
	}, func() func() {
		if err := referenceTarPgzip(src, out); err != nil {
			b.Fatal(err)
		}
		return nil
	})
}

func referenceTarPgzip(src, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, _ := pgzip.NewWriterLevel(f, pgzip.BestSpeed)
	gz.SetConcurrency(1<<20, 2*runtime.GOMAXPROCS(0))
	tw := tar.NewWriter(gz)
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == src {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = rel
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			r, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, r)
			r.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// restoreArchive makes the archive restored by the restore benchmarks.
func restoreArchive(b *testing.B) string {
	src, _ := benchTree(b)
	p := filepath.Join(benchDir, "restore.tar.gz")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	f, _ := os.Create(p)
	bw := bufio.NewWriterSize(f, 1<<20)
	if _, err := Write(context.Background(), bw, benchFS(b, src), WriteOptions{Level: LevelBestSpeed, Manifest: true, TempDir: benchDir}); err != nil {
		b.Fatal(err)
	}
	bw.Flush()
	f.Close()
	return p
}

// BenchmarkBackupRestore: archive.Extract into an empty directory, next
// to the ceiling for restore: `tar -xzf` of the same archive. The first
// run also checks the restored tree against the original.
func BenchmarkBackupRestore(b *testing.B) {
	src, total := benchTree(b)
	arc := restoreArchive(b)
	i := 0
	bench.Paired(b, total, func() func() {
		dst := filepath.Join(benchDir, "restore-"+strconv.Itoa(i))
		i++
		f, _ := os.Open(arc)
		res, err := Extract(context.Background(), f, benchFS(b, dst), ExtractOptions{TempDir: benchDir})
		f.Close()
		if err != nil || !res.Verified {
			b.Fatal(err, res)
		}
		return func() {
			if i == 1 {
				compareTrees(b, src, dst)
			}
			os.RemoveAll(dst)
		}
	}, func() func() {
		dst := filepath.Join(benchDir, "tar")
		os.MkdirAll(dst, 0o755)
		if out, err := exec.Command("tar", "-xzf", arc, "-C", dst).CombinedOutput(); err != nil {
			b.Fatal(err, string(out))
		}
		return func() { os.RemoveAll(dst) }
	})
}

// compareTrees fails the benchmark when dst differs from src (contents,
// modes, mtimes, link targets, empty directories).
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
		b.Fatal("restored tree differs:\n" + d)
	}
}
