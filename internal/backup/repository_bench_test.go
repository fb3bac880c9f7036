package backup

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/testutil/bench"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// BenchmarkRepositorySecondBackup: in-process, the game-server tree
// (WHARF_BENCH_TREE_MB, 1 GiB by default) backed up once into a
// repository, then per iteration 2 % of its files rewritten and backed up
// again: the timed part is that second backup (createRepository, as the
// daemon runs it). It reports first-s, second-cpu-s and
// second-%-of-first. WHARF_BENCH_CPUPROFILE=FILE profiles the second
// backups only (go test's -cpuprofile would include the first), and
// WHARF_BENCH_TRACE=FILE traces them (go tool trace -pprof=sync FILE: where
// the walk waits). WHARF_BENCH_TREE=DIR backs up the tree in DIR, made
// there when absent.
func BenchmarkRepositorySecondBackup(b *testing.B) {
	mb := benchTreeMB()
	dir := b.TempDir()
	root := filepath.Join(dir, "src")
	// WHARF_BENCH_TREE names a tree made by an earlier run, for runs of
	// several builds on one tree.
	if t := os.Getenv("WHARF_BENCH_TREE"); t != "" {
		root = t
	}
	if _, err := treeSize(root); os.IsNotExist(err) {
		_, err = tree.GameServer(root, mb<<20)
		if err != nil {
			b.Fatal(err)
		}
	} else if err != nil {
		b.Fatal(err)
	}
	srv := benchServer{tree.Open(b, root)}
	c := config.Defaults()
	c.System.BackupDirectory = filepath.Join(dir, "backups")
	c.System.TmpDirectory = filepath.Join(dir, "tmp")
	os.MkdirAll(c.System.TmpDirectory, 0o700)
	svc := New(context.Background(), config.NewStore(filepath.Join(dir, "config.yml"), c), nil, slog.New(slog.DiscardHandler))
	defer svc.Close()
	ctx := context.Background()

	syscall.Sync()
	start := time.Now()
	if _, err := svc.createRepository(ctx, srv, "first", ""); err != nil {
		b.Fatal(err)
	}
	first := time.Since(start)
	syscall.Sync()
	files := tree.RegularFiles(b, root)

	if p := os.Getenv("WHARF_BENCH_CPUPROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if p := os.Getenv("WHARF_BENCH_TRACE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			b.Fatal(err)
		}
		defer trace.Stop()
	}
	var cpu time.Duration
	n := 0
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		n++
		tree.ChangeTwoPercent(b, files, n)
		syscall.Sync()
		b.StartTimer()
		c0 := bench.ProcessCPU()
		if _, err := svc.createRepository(ctx, srv, "next-"+strconv.Itoa(n), ""); err != nil {
			b.Fatal(err)
		}
		cpu += bench.ProcessCPU() - c0
	}
	b.StopTimer()
	per := b.Elapsed() / time.Duration(n)
	b.ReportMetric(first.Seconds(), "first-s")
	b.ReportMetric(per.Seconds(), "second-s")
	b.ReportMetric(cpu.Seconds()/float64(n), "second-cpu-s")
	b.ReportMetric(100*per.Seconds()/first.Seconds(), "second-%-of-first")
}
