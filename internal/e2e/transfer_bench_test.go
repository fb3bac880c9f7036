package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/bench"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/tree"
	"github.com/wharf/wharf/internal/testutil/wait"
	"github.com/wharf/wharf/internal/tokens"
)

// cpuSeconds is the user+system CPU time a process has used so far.
func cpuSeconds(tb testing.TB, pid int) float64 {
	tb.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// benchNode starts a daemon for a benchmark (the test helpers need a *testing.T).
func benchNode(b *testing.B, name, remote string) (*exec.Cmd, *benchCfg, string) {
	b.Helper()
	// WHARF_BENCH_FIREWALL=off: both nodes without Wharf's firewall, for the
	// figures with the rules beside those without.
	c, cfgPath := clusterConfig(b, name, remote, func(_ string, c *config.Config) {
		c.Docker.Network.Firewall = os.Getenv("WHARF_BENCH_FIREWALL") != "off"
	})
	cmd := exec.Command(wharfBinary, "--config", cfgPath)
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	url := "http://127.0.0.1:" + strconv.Itoa(c.API.Port)
	if !wait.Until(30*time.Second, func() bool {
		res, err := http.Get(url + "/api/system")
		if err == nil {
			res.Body.Close()
		}
		return err == nil
	}) {
		b.Fatalf("%s did not start\n%s", name, log.String())
	}
	return cmd, &benchCfg{url: url, data: c.System.Data}, url
}

type benchCfg struct{ url, data string }

// BenchmarkTransfer1GiB moves the 1 GiB game-server tree (tree.GameServer;
// WHARF_BENCH_TREE_MB changes the size) between two daemons on loopback
// and, on the same machine, restores (extracts) the same tree from its
// archive: the transfer is bound by the target's extraction. It reports
// both throughputs, their ratio and the source daemon's CPU use, and checks
// that the tree arrives identical. The disk is synced before each timed
// part, so that neither pays for the other's writeback.
func BenchmarkTransfer1GiB(b *testing.B) {
	const id = "7a0000b1-0000-4000-8000-0000000000b1"
	const idAlone = "7a0000b1-0000-4000-8000-0000000000b2" // received from the test, no source daemon
	treeMB := int64(1024)
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
		treeMB = int64(v)
	}
	testimages.RequireDocker(b)
	testimages.GameServer(context.Background(), b)
	b.Cleanup(func() {
		for _, c := range []string{id, idAlone} {
			_, _ = testimages.Client(b).ContainerRemove(context.Background(), c, client.ContainerRemoveOptions{Force: true})
		}
	})
	// Totals over all runs: the figures are total bytes over total time.
	var mib, restoreSecs, restoreCPU, transferSecs, srcCPU, aloneSecs, aloneCPU float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Room for the tree, its archive, the restored and the received copy.
		bench.WarmMemory(b, int(treeMB)<<20*6)
		p := devpanel.New(clusterTokenID, clusterToken)
		p.PutServer(gameServer(id))
		p.PutServer(gameServer(idAlone))
		ps := httptest.NewServer(p.Handler())
		srcA, tgtA := &assignment{ids: map[string]bool{id: true}}, &assignment{ids: map[string]bool{}}
		src, srcCfg, _ := benchNode(b, "source", panelView(b, ps.URL, "source", srcA).URL)
		tgt, tgtCfg, tgtURL := benchNode(b, "target", panelView(b, ps.URL, "target", tgtA).URL)
		srcDir := filepath.Join(srcCfg.data, id)
		size, err := tree.GameServer(srcDir, treeMB<<20)
		if err != nil {
			b.Fatal(err)
		}
		want, err := tree.Snapshot(srcDir)
		if err != nil {
			b.Fatal(err)
		}
		mib += float64(size) / (1 << 20)
		arc := archiveOf(b, srcDir)
		restoreDir := filepath.Join(b.TempDir(), "restore")
		restore := func() {
			secs, cpu := restoreTime(b, arc, restoreDir)
			restoreSecs += secs
			restoreCPU += cpu
			b.Logf("run %d: restore %.1f MiB/s", i, float64(size)/(1<<20)/secs)
		}

		jwt, _ := tokens.Sign([]byte(clusterToken), map[string]any{"sub": id, "exp": time.Now().Add(time.Hour).Unix()})
		body, _ := json.Marshal(map[string]string{"url": tgtURL + "/api/transfers", "token": "Bearer " + jwt})
		req, _ := http.NewRequest("POST", srcCfg.url+"/api/servers/"+id+"/transfer", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+clusterToken)
		req.Header.Set("Content-Type", "application/json")
		transfer := func() {
			syscall.Sync()
			b.StartTimer()
			cpu0 := cpuSeconds(b, src.Process.Pid)
			start := time.Now()
			res, err := http.DefaultClient.Do(req)
			if err != nil || res.StatusCode != 202 {
				b.Fatalf("start transfer: %v %v", err, res)
			}
			res.Body.Close()
			if _, ok := p.WaitForCall("POST", "/servers/"+id+"/transfer/success", 10*time.Minute); !ok {
				b.Fatalf("no success reported: %v", p.Calls())
			}
			secs := time.Since(start).Seconds()
			transferSecs += secs
			srcCPU += cpuSeconds(b, src.Process.Pid) - cpu0
			b.Logf("run %d: transfer %.1f MiB/s", i, float64(size)/(1<<20)/secs)
			b.StopTimer()
		}
		// The target alone: the test streams a ready form (the archive and
		// its checksum) from a file, so that no source competes for the CPU.
		form, ctype := formOf(b, arc)
		receive := func() {
			f, err := os.Open(form)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			fi, _ := f.Stat()
			jwt, _ := tokens.Sign([]byte(clusterToken), map[string]any{"sub": idAlone, "exp": time.Now().Add(time.Hour).Unix()})
			req, _ := http.NewRequest("POST", tgtURL+"/api/transfers", f)
			req.ContentLength = fi.Size()
			req.Header.Set("Authorization", "Bearer "+jwt)
			req.Header.Set("Content-Type", ctype)
			syscall.Sync()
			cpu0 := cpuSeconds(b, tgt.Process.Pid)
			start := time.Now()
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			msg, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				b.Fatalf("receive: %d %s", res.StatusCode, msg)
			}
			secs := time.Since(start).Seconds()
			aloneSecs += secs
			aloneCPU += cpuSeconds(b, tgt.Process.Pid) - cpu0
			b.Logf("run %d: target alone %.1f MiB/s", i, float64(size)/(1<<20)/secs)
		}
		// Rotate the order: on a disk a later writer runs on a fuller file
		// system and after more writeback.
		ops := []func(){restore, transfer, receive}
		for k := range ops {
			ops[(i+k)%len(ops)]()
		}
		for _, dir := range []string{id, idAlone} {
			got, err := tree.Snapshot(filepath.Join(tgtCfg.data, dir))
			if err != nil {
				b.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				b.Fatalf("tree differs (-source +target %s):\n%s", dir, diff)
			}
		}
		_ = os.RemoveAll(srcDir)
		_ = os.RemoveAll(filepath.Join(tgtCfg.data, id))
		_ = os.RemoveAll(filepath.Join(tgtCfg.data, idAlone))
		_ = os.Remove(form)
		_ = os.RemoveAll(restoreDir)
		_ = os.Remove(arc)
		ps.Close()
	}
	b.ReportMetric(mib/transferSecs, "transfer-MiB/s")
	b.ReportMetric(mib/restoreSecs, "restore-MiB/s")
	b.ReportMetric(restoreSecs/transferSecs*100, "%-of-restore")
	b.ReportMetric(srcCPU/transferSecs, "source-cores")
	b.ReportMetric(restoreCPU/restoreSecs, "restore-cores")
	b.ReportMetric(mib/aloneSecs, "target-alone-MiB/s")
	b.ReportMetric(restoreSecs/aloneSecs*100, "target-alone-%-of-restore")
	b.ReportMetric(aloneCPU/aloneSecs, "target-alone-cores")
}

// formOf writes the form a source sends for the archive arc to a file and
// returns its path and content type.
func formOf(b *testing.B, arc string) (string, string) {
	b.Helper()
	in, err := os.Open(arc)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(arc + ".form")
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	mw := multipart.NewWriter(out)
	part, _ := mw.CreateFormFile("archive", "archive.tar.gz")
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(part, h), in); err != nil {
		b.Fatal(err)
	}
	if err := mw.WriteField("checksum", hex.EncodeToString(h.Sum(nil))); err != nil {
		b.Fatal(err)
	}
	if err := mw.Close(); err != nil {
		b.Fatal(err)
	}
	return out.Name(), mw.FormDataContentType()
}

// archiveOf writes the tar.gz of the tree src (as a backup would, without
// its integrity entry) to a temporary file.
func archiveOf(b *testing.B, src string) string {
	b.Helper()
	arc := filepath.Join(b.TempDir(), "tree.tar.gz")
	f, err := os.Create(arc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := archive.Write(context.Background(), f, tree.Open(b, src), archive.WriteOptions{Level: archive.LevelBestSpeed}); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return arc
}

// restoreTime extracts the archive arc into the new directory dst after a
// sync, and returns the wall time and the CPU time it took.
func restoreTime(b *testing.B, arc, dst string) (secs, cpu float64) {
	b.Helper()
	fs := tree.Open(b, dst)
	r, err := os.Open(arc)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	syscall.Sync()
	start, cpu0 := time.Now(), bench.ProcessCPU().Seconds()
	if _, err := archive.Extract(context.Background(), r, fs, archive.ExtractOptions{}); err != nil {
		b.Fatal(err)
	}
	return time.Since(start).Seconds(), bench.ProcessCPU().Seconds() - cpu0
}
