package e2e

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/docker/docker/api/types/container"
	"github.com/google/go-cmp/cmp"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/tree"
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
	c, cfgPath := clusterConfig(b, name, remote, nil)
	cmd := exec.Command(wharfBinary, "--config", cfgPath)
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	url := "http://127.0.0.1:" + strconv.Itoa(c.API.Port)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if res, err := http.Get(url + "/api/system"); err == nil {
			res.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s did not start\n%s", name, log.String())
		}
		time.Sleep(50 * time.Millisecond)
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
	treeMB := int64(1024)
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
		treeMB = int64(v)
	}
	testimages.RequireDocker(b)
	testimages.GameServer(context.Background(), b)
	b.Cleanup(func() {
		_ = testimages.Client(b).ContainerRemove(context.Background(), id, container.RemoveOptions{Force: true})
	})
	var restoreMBs, transferMBs, srcCPU float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		p := devpanel.New(clusterTokenID, clusterToken)
		p.PutServer(gameServer(id))
		ps := httptest.NewServer(p.Handler())
		srcA, tgtA := &assignment{ids: map[string]bool{id: true}}, &assignment{ids: map[string]bool{}}
		src, srcCfg, _ := benchNode(b, "source", panelView(b, ps.URL, "source", srcA).URL)
		_, tgtCfg, tgtURL := benchNode(b, "target", panelView(b, ps.URL, "target", tgtA).URL)
		srcDir := filepath.Join(srcCfg.data, id)
		size, err := tree.GameServer(srcDir, treeMB<<20)
		if err != nil {
			b.Fatal(err)
		}
		want, err := tree.Snapshot(srcDir)
		if err != nil {
			b.Fatal(err)
		}
		restoreMBs = restoreThroughput(b, srcDir, size)

		jwt, _ := tokens.Sign([]byte(clusterToken), map[string]any{"sub": id, "exp": time.Now().Add(time.Hour).Unix()})
		body, _ := json.Marshal(map[string]string{"url": tgtURL + "/api/transfers", "token": "Bearer " + jwt})
		req, _ := http.NewRequest("POST", srcCfg.url+"/api/servers/"+id+"/transfer", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+clusterToken)
		req.Header.Set("Content-Type", "application/json")

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
		elapsed := time.Since(start)
		srcCPU = (cpuSeconds(b, src.Process.Pid) - cpu0) / elapsed.Seconds()
		b.StopTimer()
		transferMBs = float64(size) / (1 << 20) / elapsed.Seconds()
		got, err := tree.Snapshot(filepath.Join(tgtCfg.data, id))
		if err != nil {
			b.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			b.Fatalf("tree differs (-source +target):\n%s", diff)
		}
		_ = os.RemoveAll(srcDir)
		_ = os.RemoveAll(filepath.Join(tgtCfg.data, id))
		ps.Close()
	}
	b.ReportMetric(transferMBs, "transfer-MiB/s")
	b.ReportMetric(restoreMBs, "restore-MiB/s")
	b.ReportMetric(transferMBs/restoreMBs*100, "%-of-restore")
	b.ReportMetric(srcCPU, "source-cores")
}

// restoreThroughput archives the tree to a file, then times its extraction.
func restoreThroughput(b *testing.B, src string, size int64) float64 {
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
	defer os.Remove(arc)
	dstDir := filepath.Join(b.TempDir(), "restore")
	dst := tree.Open(b, dstDir)
	defer os.RemoveAll(dstDir)
	r, err := os.Open(arc)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	syscall.Sync()
	start := time.Now()
	if _, err := archive.Extract(context.Background(), r, dst, archive.ExtractOptions{}); err != nil {
		b.Fatal(err)
	}
	return float64(size) / (1 << 20) / time.Since(start).Seconds()
}
