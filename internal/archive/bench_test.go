package archive

import (
	"archive/tar"
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/pgzip"

	"github.com/wharf/wharf/internal/sandbox"
)

// The benchmark tree: a generated game-server-like tree of about
// WHARF_BENCH_TREE_MB MiB (1024 by default), made once per run.
var (
	benchOnce  sync.Once
	benchDir   string
	benchBytes int64
	benchErr   error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		_ = os.RemoveAll(benchDir)
	}
	os.Exit(code)
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
			benchBytes, benchErr = genTree(filepath.Join(benchDir, "src"), mb<<20)
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return filepath.Join(benchDir, "src"), benchBytes
}

// genTree writes: 40% compressible world files (region files of 4-16 MiB),
// 35% incompressible jars, 25% small text files (configs, logs, player
// data; tens of thousands), plus symlinks and empty directories.
func genTree(root string, total int64) (int64, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	var written int64
	write := func(name string, size int64, gen func([]byte)) error {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		buf := make([]byte, 64<<10)
		for left := size; left > 0; {
			n := min(left, int64(len(buf)))
			gen(buf[:n])
			bw.Write(buf[:n])
			left -= n
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		written += size
		mt := time.Unix(1_600_000_000+rng.Int64N(50_000_000), 0)
		if err := f.Close(); err != nil {
			return err
		}
		return os.Chtimes(p, mt, mt)
	}
	random := func(p []byte) {
		for i := 0; i+8 <= len(p); i += 8 {
			v := rng.Uint64()
			for j := range 8 {
				p[i+j] = byte(v >> (8 * j))
			}
		}
	}
	world := func(p []byte) { // chunk-like: runs of a few values with noise
		for i := range p {
			if rng.IntN(16) == 0 {
				p[i] = byte(rng.IntN(256))
			} else {
				p[i] = byte(i / 64 % 7)
			}
		}
	}
	words := strings.Fields("player joined the game left spawn world chunk saved tick lag entity block item true false motd max-players 20 server port enable-command")
	text := func(p []byte) {
		i := 0
		for i < len(p) {
			w := words[rng.IntN(len(words))]
			i += copy(p[i:], w)
			if i < len(p) {
				p[i] = " \n="[rng.IntN(3)]
				i++
			}
		}
	}
	for i := 0; written < total*40/100; i++ {
		if err := write(fmt.Sprintf("world/region/r.%d.%d.mca", i%32, i/32), (4+rng.Int64N(12))<<20, world); err != nil {
			return 0, err
		}
	}
	for i := 0; written < total*75/100; i++ {
		if err := write(fmt.Sprintf("plugins/plugin-%d.jar", i), (1+rng.Int64N(15))<<20, random); err != nil {
			return 0, err
		}
	}
	for i := 0; written < total; i++ {
		if err := write(fmt.Sprintf("data/d%02d/s%02d/file-%d.yml", i%40, i/40%25, i), 512+rng.Int64N(15<<10), text); err != nil {
			return 0, err
		}
	}
	for i := range 200 {
		if err := os.MkdirAll(filepath.Join(root, "empty", strconv.Itoa(i)), 0o750); err != nil {
			return 0, err
		}
		if err := os.Symlink(fmt.Sprintf("../plugins/plugin-%d.jar", i%5), filepath.Join(root, "data", fmt.Sprintf("link-%d", i))); err != nil {
			return 0, err
		}
	}
	return written, nil
}

func benchFS(b *testing.B, root string) *sandbox.FS {
	f, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f.Trusted()
}

// BenchmarkBackupCreate: archive.Write of the tree into a file.
func BenchmarkBackupCreate(b *testing.B) {
	src, total := benchTree(b)
	fsys := benchFS(b, src)
	out := filepath.Join(benchDir, "create.tar.gz")
	b.SetBytes(total)
	b.ResetTimer()
	for b.Loop() {
		f, _ := os.Create(out)
		bw := bufio.NewWriterSize(f, 1<<20)
		if _, err := Write(context.Background(), bw, fsys, WriteOptions{Level: LevelBestSpeed, Manifest: true, TempDir: benchDir}); err != nil {
			b.Fatal(err)
		}
		bw.Flush()
		f.Close()
	}
}

// BenchmarkReferenceTarPgzip: the ceiling for create — archive/tar and
// pgzip level 1 on all cores into a file, nothing else.
func BenchmarkReferenceTarPgzip(b *testing.B) {
	src, total := benchTree(b)
	out := filepath.Join(benchDir, "ref.tar.gz")
	b.SetBytes(total)
	b.ResetTimer()
	for b.Loop() {
		f, _ := os.Create(out)
		gz, _ := pgzip.NewWriterLevel(f, pgzip.BestSpeed)
		gz.SetConcurrency(1<<20, 2*runtime.GOMAXPROCS(0))
		tw := tar.NewWriter(gz)
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
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
			b.Fatal(err)
		}
		tw.Close()
		gz.Close()
		f.Close()
	}
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

// BenchmarkBackupRestore: archive.Extract into an empty directory; the
// first run also checks the restored tree against the original.
func BenchmarkBackupRestore(b *testing.B) {
	src, total := benchTree(b)
	arc := restoreArchive(b)
	b.SetBytes(total)
	i := 0
	b.ResetTimer()
	for b.Loop() {
		dst := filepath.Join(benchDir, "restore-"+strconv.Itoa(i))
		i++
		f, _ := os.Open(arc)
		res, err := Extract(context.Background(), bufio.NewReaderSize(f, 1<<20), benchFS(b, dst), ExtractOptions{TempDir: benchDir})
		f.Close()
		if err != nil || !res.Verified {
			b.Fatal(err, res)
		}
		b.StopTimer()
		if i == 1 {
			if diff := sameTree(src, dst); diff != "" {
				b.Fatal("restored tree differs: " + diff)
			}
		}
		os.RemoveAll(dst)
		b.StartTimer()
	}
}

// BenchmarkReferenceTarXzf: the ceiling for restore — `tar -xzf`.
func BenchmarkReferenceTarXzf(b *testing.B) {
	_, total := benchTree(b)
	arc := restoreArchive(b)
	b.SetBytes(total)
	i := 0
	b.ResetTimer()
	for b.Loop() {
		dst := filepath.Join(benchDir, "tar-"+strconv.Itoa(i))
		i++
		os.MkdirAll(dst, 0o755)
		if out, err := exec.Command("tar", "-xzf", arc, "-C", dst).CombinedOutput(); err != nil {
			b.Fatal(err, string(out))
		}
		b.StopTimer()
		os.RemoveAll(dst)
		b.StartTimer()
	}
}

// sameTree compares contents, modes, mtimes (to the second), link targets
// and empty directories; "" when identical.
func sameTree(a, b string) string {
	type meta struct {
		mode  fs.FileMode
		mtime int64
		size  int64
		link  string
	}
	walk := func(root string) (map[string]meta, error) {
		m := map[string]meta{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			e := meta{mode: fi.Mode(), mtime: fi.ModTime().Unix(), size: fi.Size()}
			if fi.Mode()&fs.ModeSymlink != 0 {
				e.link, _ = os.Readlink(p)
				e.mtime = 0
			}
			if rel == "." {
				e.mtime, e.mode = 0, 0
			}
			if fi.IsDir() {
				e.size = 0
			}
			m[rel] = e
			return nil
		})
		return m, err
	}
	ma, err := walk(a)
	if err != nil {
		return err.Error()
	}
	mb, err := walk(b)
	if err != nil {
		return err.Error()
	}
	if len(ma) != len(mb) {
		return fmt.Sprintf("%d entries vs %d", len(ma), len(mb))
	}
	for k, v := range ma {
		if mb[k] != v {
			return fmt.Sprintf("%s: %+v vs %+v", k, v, mb[k])
		}
		if v.mode.IsRegular() {
			x, _ := os.ReadFile(filepath.Join(a, k))
			y, _ := os.ReadFile(filepath.Join(b, k))
			if string(x) != string(y) {
				return k + ": content differs"
			}
		}
	}
	return ""
}
