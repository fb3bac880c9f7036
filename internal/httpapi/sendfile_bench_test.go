package httpapi

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/testutil/bench"
)

// childEnv makes TestDownloadServerChild serve instead of returning.
const childEnv = "WHARF_BENCH_DOWNLOAD_CHILD"

// TestDownloadServerChild is the server process of
// BenchmarkSignedDownloadSendfile; run by anything else it does nothing. It
// serves one file of WHARF_BENCH_DOWNLOAD_MB MiB twice: as the daemon does,
// and behind a response writer that hides ReadFrom (as the access log's
// wrapper did before), so that the file is copied through user space. It
// prints both URLs and the server's id, and serves until stdin closes.
func TestDownloadServerChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		return
	}
	size, _ := strconv.ParseInt(os.Getenv("WHARF_BENCH_DOWNLOAD_MB"), 10, 64)
	srv, id, data := benchNode(t)
	copied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		srv.Config.Handler.ServeHTTP(struct{ http.ResponseWriter }{w}, r)
	}))
	defer copied.Close()
	writeRandomFile(t, filepath.Join(data, "world.bin"), size<<20)
	fmt.Printf("READY %s %s %s\n", srv.URL, copied.URL, id)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// processCPU is the user and system CPU time of a process so far.
func processCPU(tb testing.TB, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command name (which ends with ')'): utime is the
	// 12th, stime the 13th.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ
	return time.Duration(ut+st) * time.Second / ticks
}

// BenchmarkSignedDownloadSendfile measures GET /download/file of a 1 GiB
// file (WHARF_BENCH_DOWNLOAD_MB) served by a separate process, side by side
// with the same download copied through user space (the writer that hid
// ReadFrom), and reports the server process's CPU per download for each.
func BenchmarkSignedDownloadSendfile(b *testing.B) {
	mb := int64(1024)
	if v, err := strconv.ParseInt(os.Getenv("WHARF_BENCH_DOWNLOAD_MB"), 10, 64); err == nil && v > 0 {
		mb = v
	}
	size := mb << 20
	cmd := exec.Command(os.Args[0], "-test.run=^TestDownloadServerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1", "WHARF_BENCH_DOWNLOAD_MB="+strconv.FormatInt(mb, 10))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	var sendfileURL, copiedURL, id string
	if _, serr := fmt.Sscanf(line, "READY %s %s %s", &sendfileURL, &copiedURL, &id); err != nil || serr != nil {
		b.Fatalf("server process: %q, %v, %v", line, err, serr)
	}

	buf := make([]byte, 1<<20)
	var cpu = map[string]time.Duration{}
	get := func(base string) func() func() {
		return func() func() {
			tok := signed(b, map[string]any{"file_path": "world.bin", "server_uuid": id})
			before := processCPU(b, cmd.Process.Pid)
			res, err := http.Get(base + "/download/file?token=" + tok)
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.CopyBuffer(struct{ io.Writer }{io.Discard}, res.Body, buf)
			res.Body.Close()
			if res.StatusCode != 200 || n != size {
				b.Fatalf("status %d, %d bytes", res.StatusCode, n)
			}
			cpu[base] += processCPU(b, cmd.Process.Pid) - before
			return nil
		}
	}
	bench.Paired(b, size, get(sendfileURL), get(copiedURL))
	runs := float64(b.N)
	b.ReportMetric(cpu[sendfileURL].Seconds()*1000/runs, "server-cpu-ms/op")
	b.ReportMetric(cpu[copiedURL].Seconds()*1000/runs, "ref-server-cpu-ms/op")
}
