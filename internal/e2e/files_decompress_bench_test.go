package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/bench"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// childrenCPU is the CPU time of the waited-for children of a process
// (cutime + cstime in /proc/<pid>/stat): for the daemon, its decompress
// children.
func childrenCPU(tb testing.TB, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	ut, _ := strconv.ParseInt(f[13], 10, 64)
	st, _ := strconv.ParseInt(f[14], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // CLK_TCK = 100
}

// BenchmarkDecompressE2E: files/decompress of a tar.gz of a game-server
// tree (tree.GameServer, WHARF_BENCH_TREE_MB MiB, 512 by default) on the
// real binary, timed at the client, into an empty directory of the server,
// next to `tar -xzf` of the same archive on the same disk. It reports the
// daemon's CPU (daemon-cpu-s/op), its decompress child's (child-cpu-s/op,
// from the daemon's cutime/cstime) and tar's (tar-cpu-s/op).
//
// No tree is deleted before the end of the benchmark: the source tree and
// every extraction's tree (ours and tar's) stay until all the runs are done.
// On a journal-less ext4 (this project's VMs) a new inode costs a scan of
// the inodes freed in the last 30 s (dirty_expire_centisecs: ext4 will not
// reuse them yet), so an extraction that followed the deletion of the last
// one's tree, as each did when every run deleted its tree in its cleanup,
// paid for it, by an amount that depended on how long ago that was: the
// figures of one agent swung by ±40 % between runs.
func BenchmarkDecompressE2E(b *testing.B) {
	size := benchSize("WHARF_BENCH_TREE_MB")
	if os.Getenv("WHARF_BENCH_TREE_MB") == "" {
		size = 512 << 20
	}
	start := time.Now()
	s := exampleServer(filesServer)
	s.Settings["build"] = map[string]any{"memory_limit": 1024, "disk_space": 0}
	n := startNode(b, nodeOptions{servers: []devpanel.Server{s}})
	base := filepath.Dir(n.Config.System.Data)
	src := filepath.Join(base, "src")
	total, err := tree.GameServer(src, size)
	if err != nil {
		b.Fatal(err)
	}
	arc := filepath.Join(base, "tree.tar.gz")
	if out, err := exec.Command("tar", "-czf", arc, "-C", src, ".").CombinedOutput(); err != nil {
		b.Fatal(err, string(out))
	}
	// Everything made is deleted at the end, not between the runs; and the
	// first run starts once the inodes freed before this benchmark started
	// (the previous benchmark's trees) are no longer recent.
	waitInodesSettled(start)
	keep := []string{src}
	defer func() {
		for _, d := range keep {
			_ = os.RemoveAll(d)
		}
	}()
	pid := n.cmd.Process.Pid
	var daemonCPU, childCPU, tarCPU time.Duration
	runs, i := 0, 0
	bench.Paired(b, total, func() func() {
		dir := "run-" + strconv.Itoa(i)
		i++
		if err := os.MkdirAll(n.fpath(dir), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.Link(arc, n.fpath(dir+"/a.tar.gz")); err != nil {
			b.Fatal(err)
		}
		cpu0, child0 := procCPU(b, pid), childrenCPU(b, pid)
		res, body := n.files("POST", "decompress", map[string]string{"root": "/" + dir, "file": "a.tar.gz"})
		if res.StatusCode != 204 {
			b.Fatalf("decompress: %d %s", res.StatusCode, body)
		}
		daemonCPU += procCPU(b, pid) - cpu0
		childCPU += childrenCPU(b, pid) - child0
		runs++
		keep = append(keep, n.fpath(dir))
		return nil
	}, func() func() {
		dst := filepath.Join(base, "ref-"+strconv.Itoa(len(keep)))
		_ = os.MkdirAll(dst, 0o755)
		keep = append(keep, dst)
		var ru0, ru1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru0)
		if out, err := exec.Command("tar", "-xzf", arc, "-C", dst).CombinedOutput(); err != nil {
			b.Fatal(err, string(out))
		}
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru1)
		tarCPU += time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
		return nil
	})
	b.ReportMetric(daemonCPU.Seconds()/float64(runs), "daemon-cpu-s/op")
	b.ReportMetric(childCPU.Seconds()/float64(runs), "child-cpu-s/op")
	b.ReportMetric(tarCPU.Seconds()/float64(runs), "tar-cpu-s/op")
}

// waitInodesSettled waits until the inodes freed before t are reusable
// without a scan: ext4 without a journal treats an inode freed less than
// vm.dirty_expire_centisecs ago as recently deleted (and every new inode
// of its group checks them), so a benchmark that starts right after
// another deleted its trees would pay for them in its first runs.
func waitInodesSettled(t time.Time) {
	cs := 3000
	if data, err := os.ReadFile("/proc/sys/vm/dirty_expire_centisecs"); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			cs = v
		}
	}
	// The point of this sleep: the kernel's window is a time, not a
	// condition this process can observe.
	time.Sleep(time.Until(t.Add(time.Duration(cs)*10*time.Millisecond + time.Second)))
}
