package e2e

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// BenchmarkBrowseBackups1GiB (issue 35, "Speed"): on the real binary, the
// 1 GiB game-server tree plus a 10 MB file, ten repository backups with 2 %
// of the files changed between them; then, side by side with the same
// operation on the live tree, through the file manager and SFTP: listing
// the root (the backup's: the tenth, cold = its first listing: from its
// stored index, or else by reading the manifest and the trailer; warm =
// the median of the next ones), and reading the 10 MB file (median of 5);
// also the first listing of each of
// the nine other backups (median) and the tenth backup's wall time. The
// daemon's peak RSS above its resident set before the reads (VmHWM reset)
// is reported for the backup's reads. WHARF_BENCH_TREE_MB scales the tree.
func BenchmarkBrowseBackups1GiB(b *testing.B) {
	treeMB := int64(1024)
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
		treeMB = int64(v)
	}
	for range b.N {
		benchBrowse(b, treeMB)
	}
}

func benchBrowse(b *testing.B, treeMB int64) {
	b.StopTimer()
	n := startNode(b, nodeOptions{fake: true, servers: []devpanel.Server{gameServer(backupServer)},
		mutate: func(c *config.Config) { c.System.Backups.Format = config.BackupFormatRepository }})
	dir := n.serverDir(backupServer)
	if _, err := tree.GameServer(dir, treeMB<<20); err != nil {
		b.Fatal(err)
	}
	big := randomBytes(10_000_000)
	if err := os.WriteFile(filepath.Join(dir, "big10.bin"), []byte(big), 0o644); err != nil {
		b.Fatal(err)
	}
	syscall.Sync()
	var last string
	var ids []string
	var lastBackup time.Duration
	for i := range 10 {
		if i > 0 {
			tree.ChangeTwoPercent(b, tree.RegularFiles(b, dir), i)
			syscall.Sync()
		}
		last = newBackupID()
		t0 := time.Now()
		if st := n.backup(last, "local", ""); !st.Successful {
			b.Fatal("backup failed")
		}
		lastBackup = time.Since(t0)
		ids = append(ids, last)
	}
	n.Panel.SetSFTPUsers(devpanel.SFTPUser{Username: "alice", Password: sftpPass, Server: backupServer, User: sftpOwner, Permissions: []string{"*"}})
	c := n.sftpOpen(b, sftpLogin("alice", backupServer), ssh.Password(sftpPass))
	in := "/.backups/" + last

	timeIt := func(f func()) float64 {
		t0 := time.Now()
		f()
		return float64(time.Since(t0).Microseconds()) / 1000
	}
	median := func(k int, f func()) float64 {
		var xs []float64
		for range k {
			xs = append(xs, timeIt(f))
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	list := func(d string) func() {
		return func() {
			if code, _, body := n.list(d); code != 200 {
				b.Fatalf("list %s: %d %s", d, code, body)
			}
		}
	}
	read := func(f string) func() {
		return func() {
			if r, body := n.contents(f); r.code != 200 || len(body) != len(big) {
				b.Fatalf("contents %s: %+v %d", f, r, len(body))
			}
		}
	}
	sftpList := func(d string) func() {
		return func() {
			if _, err := c.ReadDir(d); err != nil {
				b.Fatal(err)
			}
		}
	}
	sftpGet := func(f string) func() {
		return func() {
			fh, err := c.Open(f)
			if err != nil {
				b.Fatal(err)
			}
			nb, err := io.Copy(io.Discard, fh)
			fh.Close()
			if err != nil || nb != int64(len(big)) {
				b.Fatalf("sftp get %s: %d %v", f, nb, err)
			}
		}
	}
	b.StartTimer()
	n.resetHWM()
	rss0 := n.rssKiB()
	b.ReportMetric(timeIt(list(in)), "fm-list-backup-cold-ms")
	// The first listing of each of the nine other backups: the cold
	// listing's median, less at the mercy of one moment's load.
	var colds []float64
	for _, id := range ids[:9] {
		colds = append(colds, timeIt(list("/.backups/"+id)))
	}
	slices.Sort(colds)
	b.ReportMetric(colds[len(colds)/2], "fm-list-backup-cold-median9-ms")
	b.ReportMetric(lastBackup.Seconds(), "backup10-s")
	b.ReportMetric(median(5, list(in)), "fm-list-backup-ms")
	b.ReportMetric(median(5, list("/")), "fm-list-live-ms")
	b.ReportMetric(median(5, read(in+"/big10.bin")), "fm-read10MB-backup-ms")
	b.ReportMetric(median(5, read("/big10.bin")), "fm-read10MB-live-ms")
	// The daemon's CPU per read (ticks of 10 ms, over 10 reads): what the
	// load of the machine does not change.
	cpuPer := func(f func()) float64 {
		t0 := n.cpuTicks()
		for range 10 {
			f()
		}
		return float64(n.cpuTicks()-t0) * 10 / 10
	}
	b.ReportMetric(cpuPer(read(in+"/big10.bin")), "fm-read10MB-backup-cpu-ms")
	b.ReportMetric(cpuPer(read("/big10.bin")), "fm-read10MB-live-cpu-ms")
	b.ReportMetric(median(5, sftpList(in)), "sftp-list-backup-ms")
	b.ReportMetric(median(5, sftpList("/")), "sftp-list-live-ms")
	b.ReportMetric(median(5, sftpGet(in+"/big10.bin")), "sftp-read10MB-backup-ms")
	b.ReportMetric(median(5, sftpGet("/big10.bin")), "sftp-read10MB-live-ms")
	b.ReportMetric(float64(max(0, n.hwmKiB()-rss0))/1024, "rss-peak-above-idle-MiB")
	b.StopTimer()
}
