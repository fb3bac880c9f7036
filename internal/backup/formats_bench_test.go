package backup

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
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
	mb := int64(1024)
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
		mb = int64(v)
	}
	dir := b.TempDir()
	root := filepath.Join(dir, "server")
	total, err := tree.GameServer(root, mb<<20)
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
				b.StartTimer()
				var err error
				if format == config.BackupFormatRepository {
					_, err = svc.createRepository(context.Background(), srv, uuid.NewString(), "")
				} else {
					_, err = svc.createLocal(context.Background(), srv, uuid.NewString(), "")
				}
				b.StopTimer()
				stop()
				svc.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
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
