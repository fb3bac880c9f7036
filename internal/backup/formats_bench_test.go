package backup

import (
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// BenchmarkFirstBackupFormats: the first local backup of the game-server
// tree in the archive and the repository format, in process, so that a CPU
// profile (WHARF_BENCH_PROFILE=DIR writes DIR/<format>.pprof) explains the
// figures BackupFormats1GiB measures from the outside. WHARF_BENCH_TREE_MB
// scales the tree (1 GiB by default).
func BenchmarkFirstBackupFormats(b *testing.B) {
	mb := benchTreeMB()
	dir := b.TempDir()
	root := filepath.Join(dir, "server")
	// WHARF_BENCH_TREE names a tree made by an earlier run, for runs of
	// several builds on one tree.
	if t := os.Getenv("WHARF_BENCH_TREE"); t != "" {
		root = t
	}
	total, err := treeSize(root)
	if os.IsNotExist(err) {
		total, err = tree.GameServer(root, mb<<20)
	}
	if err != nil {
		b.Fatal(err)
	}
	srv := benchServer{files: tree.Open(b, root)}
	for _, format := range []string{config.BackupFormatArchive, config.BackupFormatRepository} {
		b.Run(format, func(b *testing.B) {
			b.SetBytes(total)
			for range b.N {
				b.StopTimer()
				svc := formatService(b, filepath.Join(dir, format+strconv.Itoa(b.N)), format)
				stop := profile(b, format)
				cpu0 := cpuTime()
				b.StartTimer()
				var err error
				if format == config.BackupFormatRepository {
					_, err = svc.createRepository(context.Background(), srv, uuid.NewString(), "")
				} else {
					_, err = svc.createLocal(context.Background(), srv, uuid.NewString(), "")
				}
				b.StopTimer()
				b.ReportMetric(cpuTime()-cpu0, "cpu-s/op")
				stop()
				svc.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// cpuTime is the process's CPU seconds so far.
func cpuTime() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// treeSize is the bytes of the regular files under root.
func treeSize(root string) (int64, error) {
	if _, err := os.Stat(root); err != nil {
		return 0, err
	}
	var total int64
	err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fi, ierr := d.Info()
			if ierr != nil {
				return ierr
			}
			total += fi.Size()
		}
		return err
	})
	return total, err
}

func formatService(b *testing.B, dir, format string) *Service {
	c := config.Defaults()
	c.System.BackupDirectory = filepath.Join(dir, "backups")
	c.System.TmpDirectory = filepath.Join(dir, "tmp")
	c.System.Backups.Format = format
	cfg := config.NewStore(filepath.Join(dir, "config.yml"), c)
	client := panel.New(func() panel.Settings {
		return panel.Settings{Remote: "http://127.0.0.1:1", TokenID: "tid", Token: "token", Timeout: time.Second}
	}, "bench")
	return New(context.Background(), cfg, client, slog.New(slog.DiscardHandler))
}

// profile starts a CPU profile into WHARF_BENCH_PROFILE/name.pprof.
func profile(b *testing.B, name string) func() {
	out := os.Getenv("WHARF_BENCH_PROFILE")
	if out == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(out, name+".pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	tf, err := os.Create(filepath.Join(out, name+".trace"))
	if err != nil {
		b.Fatal(err)
	}
	if err := trace.Start(tf); err != nil {
		b.Fatal(err)
	}
	return func() { trace.Stop(); tf.Close(); pprof.StopCPUProfile(); f.Close() }
}

// BenchmarkRestoreFormats: a truncating restore of the game-server tree's
// backup, archive and repository, into an empty directory (over a copy of
// the tree with WHARF_BENCH_RESTORE_OVER=1), in process
// (WHARF_BENCH_PROFILE as for BenchmarkFirstBackupFormats, files
// restore-<format>.pprof).
func BenchmarkRestoreFormats(b *testing.B) {
	root := os.Getenv("WHARF_BENCH_TREE")
	if root == "" {
		b.Skip("WHARF_BENCH_TREE names the tree to back up and restore")
	}
	total, err := treeSize(root)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	srv := benchServer{files: tree.Open(b, root)}
	for _, format := range []string{config.BackupFormatArchive, config.BackupFormatRepository} {
		b.Run(format, func(b *testing.B) {
			svc := formatService(b, filepath.Join(dir, format), format)
			defer svc.Close()
			id := uuid.NewString()
			if format == config.BackupFormatRepository {
				_, err = svc.createRepository(context.Background(), srv, id, "")
			} else {
				_, err = svc.createLocal(context.Background(), srv, id, "")
			}
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(total)
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				out := filepath.Join(dir, format+"-out"+strconv.Itoa(i))
				if err := os.Mkdir(out, 0o755); err != nil {
					b.Fatal(err)
				}
				if os.Getenv("WHARF_BENCH_RESTORE_OVER") != "" {
					// Over a copy of the tree, as the panel's restore of a
					// live server truncates a full directory.
					if out, err := exec.Command("cp", "-a", root+"/.", out).CombinedOutput(); err != nil {
						b.Fatalf("cp: %v %s", err, out)
					}
					// On disk, as a server's files are: truncating a file
					// whose blocks are not allocated yet costs nothing.
					syscall.Sync()
				}
				plan, src := restoreSource(b, svc, srv, id)
				stop := profile(b, "restore-"+format)
				cpu0 := cpuTime()
				b.StartTimer()
				dst := tree.Open(b, out)
				_, err := svc.extract(context.Background(), benchServer{files: dst}, dst.Trusted(), plan, src)
				b.StopTimer()
				b.ReportMetric(cpuTime()-cpu0, "cpu-s/op")
				stop()
				src.Close()
				if err != nil {
					b.Fatal(err)
				}
				os.RemoveAll(out)
			}
		})
	}
}

// restoreSource opens backup id of srv as Restore does (a truncating
// local restore) and returns its plan.
func restoreSource(b *testing.B, svc *Service, srv benchServer, id string) (restorePlan, io.ReadCloser) {
	in, path, repo, err := svc.restoreFacts(srv, id, RestoreRequest{Adapter: Local, TruncateDirectory: true})
	if err != nil {
		b.Fatal(err)
	}
	plan, err := planRestore(in)
	if err != nil {
		b.Fatal(err)
	}
	src, err := svc.openRestoreSource(context.Background(), plan, "", path, repo)
	if err != nil {
		b.Fatal(err)
	}
	return plan, src
}
