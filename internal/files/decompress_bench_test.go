package files

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/isolate"
	"github.com/wharf/wharf/internal/testutil/bench"
)

// BenchmarkDecompressTarGzIsolated: Decompress through the isolated child
// (this test binary as `extract-worker`, the limits of the defaults), next
// to Decompress in this process, on the same archive into an empty
// server: %-of-ref is the isolation's cost (100 % is none; the target is
// at least 91 %, an overhead of at most 10 %). child-cpu-s/op is the
// child's CPU (rusage), which cpu-s/op, this process's, does not count.
func BenchmarkDecompressTarGzIsolated(b *testing.B) {
	_, total := benchTree(b)
	arc := benchArchive(b, "tar.gz")
	run := func(name string, isolated bool) func() func() {
		i := 0
		return func() func() {
			dst := filepath.Join(benchDir, name+"-"+strconv.Itoa(i))
			i++
			_ = os.MkdirAll(dst, 0o755)
			if err := os.Link(arc, filepath.Join(dst, "a.tar.gz")); err != nil {
				b.Fatal(err)
			}
			m := New(userFS(b, dst))
			if isolated {
				m.Isolation = &Isolation{
					Command: []string{os.Args[0], WorkerCommand},
					Limits:  isolate.Limits{Memory: 1 << 30, CPU: 1800 * time.Second, Wall: time.Hour},
					UID:     -1, GID: -1, Denylist: []string{"*.secret"},
				}
			}
			if _, err := m.Decompress(context.Background(), "/", "a.tar.gz"); err != nil {
				b.Fatal(err)
			}
			return func() { os.RemoveAll(dst) }
		}
	}
	start := childrenCPU()
	bench.Paired(b, total, run("isolated", true), run("here", false))
	b.ReportMetric((childrenCPU()-start).Seconds()/float64(b.N), "child-cpu-s/op")
}

// childrenCPU is the user and system CPU of this process's waited-for
// children so far.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
