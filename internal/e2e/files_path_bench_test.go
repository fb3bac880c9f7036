package e2e

import (
	"strconv"
	"testing"

	"github.com/wharf/wharf/internal/devpanel"
)

// BenchmarkCreateDirectoryDepth times create-directory of a new tree of
// 64, 128 and 256 levels (the depth limit) at the client, with the
// daemon's CPU per request (cpu-s/op, from /proc): both grow linearly with
// the depth. "refused-4000" is a 4,000-level path, answered 400 at once.
func BenchmarkCreateDirectoryDepth(b *testing.B) {
	n := startNode(b, nodeOptions{servers: []devpanel.Server{exampleServer(filesServer)}})
	pid := n.cmd.Process.Pid
	run := func(b *testing.B, name func(i int) string, want int) {
		startCPU := cpuSeconds(b, pid)
		i := 0
		for b.Loop() {
			res, body := n.files("POST", "create-directory", map[string]string{"name": name(i), "path": "/"})
			if res.StatusCode != want {
				b.Fatalf("create-directory: %d %s, want %d", res.StatusCode, body, want)
			}
			i++
		}
		b.ReportMetric((cpuSeconds(b, pid)-startCPU)/float64(i), "cpu-s/op")
	}
	for _, depth := range []int{64, 128, 256} {
		b.Run("depth="+strconv.Itoa(depth), func(b *testing.B) {
			prefix := "t" + strconv.Itoa(depth) + "-"
			run(b, func(i int) string { return prefix + strconv.Itoa(i) + "/" + deepPath(depth-2, "leaf") }, 204)
		})
	}
	b.Run("refused-4000", func(b *testing.B) {
		deep := deepPath(4000, "leaf")
		run(b, func(int) string { return deep }, 400)
	})
}
