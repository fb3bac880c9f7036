package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// TestBackupObjectStoreFigures measures an object-store backup of the
// benchmark tree from the outside, for docs/benchmarks.md: wall time at the
// panel (request → status report), peak disk in the daemon's backup and
// temp directories, the daemon's CPU time and peak RSS. It runs only with
// WHARF_S3_FIGURES=1; WHARF_S3_FIGURES_TREE reuses a tree made by an
// earlier run (made there when absent), WHARF_S3_FIGURES_MB sets its size
// (1024), WHARF_S3_FIGURES_PART the panel's part size in MiB (64). Run it
// once per binary (WHARF_E2E_BINARY) to compare.
func TestBackupObjectStoreFigures(t *testing.T) {
	if os.Getenv("WHARF_S3_FIGURES") != "1" {
		t.Skip("set WHARF_S3_FIGURES=1")
	}
	mb := int64(1024)
	if v, err := strconv.Atoi(os.Getenv("WHARF_S3_FIGURES_MB")); err == nil && v > 0 {
		mb = int64(v)
	}
	partSize := int64(64 << 20)
	if v, err := strconv.Atoi(os.Getenv("WHARF_S3_FIGURES_PART")); err == nil && v > 0 {
		partSize = int64(v) << 20
	}
	src := os.Getenv("WHARF_S3_FIGURES_TREE")
	if src == "" {
		src = filepath.Join(t.TempDir(), "tree")
	}
	if _, err := os.Stat(src); err != nil {
		if _, err := tree.GameServer(src, mb<<20); err != nil {
			t.Fatal(err)
		}
	}
	store := objectstore.Start(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{gameServer(backupServer)}})
	dir := n.serverDir(backupServer)
	// Hard links into the server's root (the daemon holds it open): the
	// same files, no copy.
	if out, err := exec.Command("cp", "-al", src+"/.", dir).CombinedOutput(); err != nil {
		t.Fatalf("cp -al: %v %s", err, out)
	}
	var p s3Panel
	p.install(n, store, partSize, "", nil)
	disk := watchDisk(t, n.Config.System.BackupDirectory, n.Config.System.TmpDirectory)
	rss := n.peakRSS()
	cpu0 := n.cpuTicks()
	id := newBackupID()
	start := time.Now()
	res, body := n.request("POST", "/api/servers/"+backupServer+"/backup", map[string]any{"adapter": "s3", "uuid": id}, "")
	if res.StatusCode != 202 {
		t.Fatalf("backup: %d %s", res.StatusCode, body)
	}
	st := n.waitBackupStatus(id, 10*time.Minute)
	wall := time.Since(start)
	cpu := n.cpuTicks() - cpu0
	peakRSS := rss()
	disk.end()
	if !st.Successful {
		t.Fatalf("status %+v\n%s", st, n.log)
	}
	p.finish(t, st)
	t.Logf("FIGURES binary=%s archive=%d parts=%d part_size=%d announced=%d wall=%.2fs cpu=%.2fs peak_rss=%dMiB peak_disk=%.1fMiB (%d files, %d samples)",
		wharfBinary, st.Size, len(st.Parts), partSize, p.announced, wall.Seconds(), float64(cpu)/100, peakRSS>>10,
		float64(disk.peak.Load())/(1<<20), disk.peakFiles.Load(), disk.samples.Load())
}
