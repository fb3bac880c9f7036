package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/testutil/wait"
)

// hugeSparse is the size of the sparse file a game process makes: it
// costs 64 MiB of disk, and reading it through takes hours.
const hugeSparse = 256 << 30

// hugeFragments is how many 4 KiB pieces of data the file holds, evenly
// spread: more than an archive's sparse entry lists (16,384, within what
// Go's tar reader accepts), so Write merges the holes between them and
// reads the file whole. (A file with fewer pieces is stored with its holes
// as holes in no time, issue 33 item 5: one truncate no longer makes a
// long compress.)
const hugeFragments = 16400

// compressNode is a node whose server (no disk limit, so that the sparse
// file's apparent size does not refuse the compress) holds a 256 GiB
// sparse file, made on the host as the game would.
func compressNode(t *testing.T) *node {
	t.Helper()
	n := filesNode(t, 0, nil)
	makeHugeSparse(t, n.fpath("huge.bin"))
	return n
}

// makeHugeSparse makes the hugeSparse file with its hugeFragments pieces
// of data at path.
func makeHugeSparse(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(hugeSparse); err != nil {
		t.Fatal(err)
	}
	piece := bytes.Repeat([]byte{0x5a}, 4096)
	for i := range int64(hugeFragments) {
		if _, err := f.WriteAt(piece, i*(hugeSparse/hugeFragments)&^4095); err != nil {
			t.Fatal(err)
		}
	}
}

// startCompress posts a compress of huge.bin with ctx; the status (0 when
// the request failed, as when ctx is cancelled) arrives on the channel.
func (n *node) startCompress(t *testing.T, ctx context.Context) <-chan int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"root": "/", "files": []string{"huge.bin"}, "name": "big", "extension": "tar.gz"})
	req, err := http.NewRequestWithContext(ctx, "POST", n.URL+"/api/servers/"+filesServer+"/files/compress", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+n.Token)
	req.Header.Set("Content-Type", "application/json")
	done := make(chan int, 1)
	go func() {
		res, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		done <- res.StatusCode
	}()
	return done
}

// cpuOverASecond is the CPU time the daemon uses over the next second.
func (n *node) cpuOverASecond(t *testing.T) float64 {
	t.Helper()
	pid := n.cmd.Process.Pid
	before := cpuSeconds(t, pid)
	time.Sleep(time.Second) // the measuring window itself
	return cpuSeconds(t, pid) - before
}

// waitUntil polls cond until it holds or within passes.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	wait.For(t, within, cond, "%s", what)
}

// archiveSize is the size of the archive being written; -1 when missing.
func (n *node) archiveSize() int64 {
	fi, err := os.Stat(n.fpath("big.tar.gz"))
	if err != nil {
		return -1
	}
	return fi.Size()
}

// stillCompressing reports whether the archive grows over the next second
// (the compress is working), logging the daemon's CPU meanwhile.
func (n *node) stillCompressing(t *testing.T) bool {
	t.Helper()
	before := n.archiveSize()
	cpu := n.cpuOverASecond(t)
	after := n.archiveSize()
	t.Logf("archive %d -> %d bytes, daemon CPU %.2f s/s", before, after, cpu)
	return before >= 0 && after > before
}

// waitCompressing is the control: the compress really runs (its archive
// grows).
func (n *node) waitCompressing(t *testing.T) {
	t.Helper()
	waitUntil(t, 30*time.Second, "the compress of the sparse file is running", func() bool {
		return n.stillCompressing(t)
	})
}

// waitIdle waits until the daemon stops using CPU (the compress ended).
func (n *node) waitCPUIdle(t *testing.T, what string) {
	t.Helper()
	waitUntil(t, 30*time.Second, what, func() bool {
		cpu := n.cpuOverASecond(t)
		t.Logf("daemon CPU: %.2f s/s", cpu)
		return cpu < 0.05
	})
}

// TestFilesCompressEndsWhenTheClientGoes: a compress of a 256 GiB sparse
// file stops when its client hangs up: the daemon goes idle and the partial
// archive is removed. Control: before the hang-up it was compressing, and
// it still was a second later (it does not end by itself).
func TestFilesCompressEndsWhenTheClientGoes(t *testing.T) {
	t.Parallel()
	n := compressNode(t)
	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	done := n.startCompress(t, ctx)
	n.waitCompressing(t)
	if !n.stillCompressing(t) {
		t.Fatal("the compress stopped by itself before the hang-up")
	}
	select {
	case st := <-done:
		t.Fatalf("the compress of 256 GiB answered %d before the hang-up", st)
	default:
	}
	hangUp()
	<-done
	n.waitCPUIdle(t, "the daemon stops compressing once the client is gone")
	waitUntil(t, 10*time.Second, "the partial archive is removed", func() bool {
		_, err := os.Stat(n.fpath("big.tar.gz"))
		return os.IsNotExist(err)
	})
	n.assertAnswersEveryFace(t, filesServer)
}

// TestFilesCompressEndsWhenTheServerIsDeleted: deleting the server while a
// compress of a 256 GiB sparse file runs ends the compress: the daemon goes
// idle and nothing of the server is left on disk.
func TestFilesCompressEndsWhenTheServerIsDeleted(t *testing.T) {
	t.Parallel()
	n := compressNode(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := n.startCompress(t, ctx)
	n.waitCompressing(t)
	if res, body := n.request("DELETE", "/api/servers/"+filesServer, nil, ""); res.StatusCode != 204 {
		t.Fatalf("delete: %d %s", res.StatusCode, body)
	}
	n.waitCPUIdle(t, "the daemon stops compressing once the server is deleted")
	select {
	case st := <-done:
		if st != 409 {
			t.Errorf("the compress answered %d after the deletion, want 409 (the server was deleted)", st)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the compress request is still open 30 s after the server was deleted")
	}
	if _, err := os.Lstat(n.dataDir(filesServer)); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(n.dataDir(filesServer))
		t.Fatalf("the deleted server's directory is still there (%v): %v", err, entries)
	}
	n.assertAnswersEveryFace(t, siblingServer)
}

// TestFilesCompressEndsWhenTheNodeStops: SIGTERM during a compress of a
// 256 GiB sparse file ends it at once: the daemon exits cleanly (the
// harness's stop fails on a non-zero exit or after 40 s), and the partial
// archive is removed.
func TestFilesCompressEndsWhenTheNodeStops(t *testing.T) {
	t.Parallel()
	n := compressNode(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := n.startCompress(t, ctx)
	n.waitCompressing(t)
	start := time.Now()
	n.stop()
	t.Logf("exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	<-done
	if _, err := os.Stat(n.fpath("big.tar.gz")); !os.IsNotExist(err) {
		t.Fatalf("the partial archive is left after the shutdown: %v", err)
	}
	if entries, _ := filepath.Glob(n.fpath("*.tar.gz")); len(entries) != 0 {
		t.Fatalf("archives left: %v", entries)
	}
}
