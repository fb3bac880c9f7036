package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
)

// BenchmarkBackupSparseAndLinks times, at the client, a local archive
// backup of the tree of TestBackupSparseAndHardLinksAttack (an 8 TiB file
// with 1 MiB of data; a 4 MiB file with 128 names) on the real binary
// (WHARF_E2E_BINARY runs another build, such as the reference), one tree
// part per sub-benchmark. A backup that has not reported within
// WHARF_BENCH_CAP (default 60 s) is reported as the cap (">" in the docs).
// Metrics: backup-s (wall time to the panel's report), archive-MiB (for
// the repository-* parts: the repository's packs), daemon-cpu-s
// (utime+stime of the daemon from /proc over the backup).
//
//	go test -p 1 -count=1 -run '^$' -bench BackupSparseAndLinks -benchtime 1x ./internal/e2e/
func BenchmarkBackupSparseAndLinks(b *testing.B) {
	limit := 60 * time.Second
	if v, err := time.ParseDuration(os.Getenv("WHARF_BENCH_CAP")); err == nil {
		limit = v
	}
	for _, part := range []string{"sparse", "links", "repository-sparse", "repository-links"} {
		b.Run(part, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				var mutate []func(*config.Config)
				if strings.HasPrefix(part, "repository-") {
					mutate = append(mutate, func(c *config.Config) { c.System.Backups.Format = config.BackupFormatRepository })
				}
				n, srv, _, _ := sparseLinksNode(b, mutate...)
				other := map[string]string{"sparse": "links", "links": "big.img"}[strings.TrimPrefix(part, "repository-")]
				if err := os.RemoveAll(filepath.Join(n.serverDir(srv), other)); err != nil {
					b.Fatal(err)
				}
				id := newBackupID()
				cpu0 := cpuSeconds(b, n.cmd.Process.Pid)
				b.StartTimer()
				start := time.Now()
				res, body := n.request("POST", "/api/servers/"+srv+"/backup", map[string]any{"adapter": "local", "uuid": id}, "")
				if res.StatusCode != 202 {
					b.Fatalf("backup: %d %s", res.StatusCode, body)
				}
				_, ok := n.Panel.WaitForCall("POST", "/backups/"+id, limit)
				took := time.Since(start)
				b.StopTimer()
				cpu := cpuSeconds(b, n.cmd.Process.Pid) - cpu0
				size := int64(-1)
				if len(mutate) > 0 {
					size = packBytes(n.repoDir())
				}
				for _, p := range []string{filepath.Join(n.Config.System.BackupDirectory, srv, id+".tar.gz"), filepath.Join(n.Config.System.BackupDirectory, id+".tar.gz")} {
					if fi, err := os.Stat(p); err == nil {
						size = fi.Size()
					}
				}
				if !ok {
					b.Logf("%s: no report within %s (capped); archive so far %d bytes", part, limit, size)
				}
				b.ReportMetric(took.Seconds(), "backup-s")
				b.ReportMetric(float64(size)/(1<<20), "archive-MiB")
				b.ReportMetric(cpu, "daemon-cpu-s")
				b.StartTimer()
			}
		})
	}
}

// packBytes is the size of the repository's packs at dir.
func packBytes(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(filepath.Join(dir, "packs"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	return total
}
