package e2e

import (
	"compress/gzip"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// TestBackupS3DownloadFigures measures, for docs/benchmarks.md (issue 33,
// item 3: the bounded read-ahead was measured on a local repository only),
// whole downloads of a repository backup stored in S3 (versitygw on this
// machine): the game-server benchmark tree (tree.GameServer,
// WHARF_S3DL_MB, 256 MiB by default) is backed up once by each binary of
// WHARF_S3DL_BINARIES (comma-separated, each a daemon built with
// -tags wharf_testruntime), each into its own prefix of one bucket; then
// the binaries download their backup in turn, WHARF_S3DL_ROUNDS rounds (3
// by default), so that the machine's load falls on all alike. Per download:
// the wall time at the client (signed URL to the last byte of the
// decompressed stream), the daemon's CPU (utime+stime from /proc) and its
// peak RSS (sampled every 20 ms). It asserts nothing.
func TestBackupS3DownloadFigures(t *testing.T) {
	bins := os.Getenv("WHARF_S3DL_BINARIES")
	if bins == "" {
		t.Skip("set WHARF_S3DL_BINARIES")
	}
	mb := envInt("WHARF_S3DL_MB", 256)
	rounds := envInt("WHARF_S3DL_ROUNDS", 3)
	store := objectstore.Start(t)
	src := t.TempDir()
	written, err := tree.GameServer(src, int64(mb)<<20)
	if err != nil {
		t.Fatal(err)
	}
	type daemon struct {
		bin string
		n   *s3Repo
		id  string
	}
	var ds []daemon
	for _, bin := range strings.Split(bins, ",") {
		r := s3RepositoryNode(t, store, "")
		r.stop()
		r.bin = bin
		r.restart()
		// Into the directory the daemon holds open (not a new one).
		if err := os.CopyFS(r.serverDir(backupServer), os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
		id := newBackupID()
		start := time.Now()
		if st := r.backup(id, "local", ""); !st.Successful {
			t.Fatalf("%s: backup failed\n%s", bin, r.log)
		}
		t.Logf("FIGURE binary=%s backup of %d MiB of files in %v", bin, written>>20, time.Since(start).Round(10*time.Millisecond))
		r.stop() // one daemon at a time: started again for its downloads
		ds = append(ds, daemon{bin, r, id})
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for round := 1; round <= rounds; round++ {
		for _, d := range ds {
			d.n.restart()
			d.n.waitIdle(t, 60*time.Second)
			base := d.n.rssKiB()
			cpu := d.n.cpuTicks()
			stop := d.n.peakRSS()
			start := time.Now()
			res, _ := d.n.openDownload(t, client, d.id, 0)
			if res.StatusCode != 200 {
				t.Fatalf("%s: download %d", d.bin, res.StatusCode)
			}
			n := countGzip(t, res)
			took := time.Since(start)
			peak := stop()
			ticks := d.n.cpuTicks() - cpu
			t.Logf("FIGURE round=%d binary=%s download %d MiB (tar) in %v = %.1f MiB/s, daemon CPU %.2f s, RSS %d -> peak %d MiB; load %s",
				round, d.bin, n>>20, took.Round(10*time.Millisecond), float64(n)/(1<<20)/took.Seconds(),
				float64(ticks)/100, base>>10, peak>>10, loadAvg())
			d.n.stop()
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// countGzip reads the gzip stream of res whole and returns its
// decompressed length.
func countGzip(t *testing.T, res *http.Response) int64 {
	t.Helper()
	defer res.Body.Close()
	zr, err := gzip.NewReader(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, zr)
	if err != nil {
		t.Fatalf("the download is not a whole tar.gz: %v", err)
	}
	return n
}
