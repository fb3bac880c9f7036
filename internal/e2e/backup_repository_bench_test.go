package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// dirBytes is the disk usage (allocated blocks) under dir.
func dirBytes(tb testing.TB, dir string) int64 {
	tb.Helper()
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// BenchmarkBackupFormats1GiB: archive against repository, from the outside
// (the real binary; wall time from the panel's request to the status
// report, the daemon's CPU from /proc) on the 1 GiB game-server tree: the
// first backup, the second after 2 % of the files changed, ten backups with
// 2 % changed between them (store size; the nine after the first give the
// median and worst of a backup after 2 % changed, of which the second is
// one sample), and the restore of the tenth. Changed files are synced
// before a backup starts, as the tree is before the first.
// WHARF_BENCH_TREE_MB scales the tree.
func BenchmarkBackupFormats1GiB(b *testing.B) {
	treeMB := int64(1024)
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
		treeMB = int64(v)
	}
	for _, format := range []string{config.BackupFormatArchive, config.BackupFormatRepository} {
		b.Run(format, func(b *testing.B) {
			for range b.N {
				benchBackupFormat(b, format, treeMB)
			}
		})
	}
}

func benchBackupFormat(b *testing.B, format string, treeMB int64) {
	b.StopTimer()
	n := startNode(b, nodeOptions{
		servers: []devpanel.Server{gameServer(backupServer)},
		mutate:  func(c *config.Config) { c.System.Backups.Format = format },
	})
	dir := n.serverDir(backupServer)
	if _, err := tree.GameServer(dir, treeMB<<20); err != nil {
		b.Fatal(err)
	}
	// The tree just written is not the backup's to flush.
	syscall.Sync()
	store := n.Config.System.BackupDirectory
	pid := n.cmd.Process.Pid
	var last string // the latest backup
	timed := func() (secs, cpu float64) {
		id := newBackupID()
		last = id
		c0, t0 := cpuSeconds(b, pid), time.Now()
		if st := n.backup(id, "local", ""); !st.Successful {
			b.Fatal("backup failed")
		}
		return time.Since(t0).Seconds(), cpuSeconds(b, pid) - c0
	}
	// Between backups the game rewrites 2 % of its files; as after making
	// the tree, the kernel writes them back before the next backup starts.
	change := func(round int) {
		tree.ChangeTwoPercent(b, tree.RegularFiles(b, dir), round)
		syscall.Sync()
	}
	first, firstCPU := timed()
	size1 := dirBytes(b, store)
	change(1)
	second, secondCPU := timed()
	size2 := dirBytes(b, store)
	// The third to the tenth are each a backup after 2 % changed, too:
	// their median and worst say how much one sample (the second) varies.
	incr := []float64{second}
	for i := 2; i < 10; i++ {
		change(i)
		s, _ := timed()
		incr = append(incr, s)
	}
	size10 := dirBytes(b, store)
	c0, t0 := cpuSeconds(b, pid), time.Now()
	if code := n.restoreBackup(last, true); code != 202 {
		b.Fatalf("restore: %d", code)
	}
	if !n.waitRestoreStatus(last, 10*time.Minute) {
		b.Fatal("restore failed")
	}
	restore, restoreCPU := time.Since(t0).Seconds(), cpuSeconds(b, pid)-c0
	b.ReportMetric(first, "first-s")
	b.ReportMetric(firstCPU, "first-cpu-s")
	b.ReportMetric(second, "second-s")
	b.ReportMetric(secondCPU, "second-cpu-s")
	b.ReportMetric(second/first*100, "second-%-of-first")
	slices.Sort(incr)
	b.ReportMetric(incr[len(incr)/2]/first*100, "incr-median-%-of-first")
	b.ReportMetric(incr[len(incr)-1]/first*100, "incr-worst-%-of-first")
	b.ReportMetric(float64(size1)/(1<<20), "store-after-1-MiB")
	b.ReportMetric(float64(size2-size1)/float64(size1)*100, "second-store-delta-%")
	b.ReportMetric(float64(size10)/(1<<20), "store-after-10-MiB")
	b.ReportMetric(restore, "restore-10th-s")
	b.ReportMetric(restoreCPU, "restore-10th-cpu-s")
}
