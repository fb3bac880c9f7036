package e2e

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/tree"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// BenchmarkRepositoryDedupScope (issue 33 item 8): what per-server
// deduplication costs in space. Two servers of one node hold the same
// game-server tree (installed from one egg and never changed: the worst
// case for per-server scope); each is backed up once, then the first
// again after 2 % of its files changed. Reported: the repository's packs
// after the first server's backup, after the second's, after the first's
// second backup, and after a restart's GC, with dedup_scope server (the
// default) and node (every backup before issue 33). The real binary on the in-memory
// runtime (no container is needed to back up); WHARF_BENCH_TREE_MB sizes
// the tree (default 256).
func BenchmarkRepositoryDedupScope(b *testing.B) {
	treeMB := int64(256)
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
		treeMB = int64(v)
	}
	for _, scope := range []string{config.DedupScopeServer, config.DedupScopeNode} {
		b.Run(scope, func(b *testing.B) {
			for range b.N {
				benchDedupScope(b, scope, treeMB)
			}
		})
	}
}

func benchDedupScope(b *testing.B, scope string, treeMB int64) {
	b.StopTimer()
	second := uuid.NewString()
	n := startNode(b, nodeOptions{
		fake:    true,
		servers: []devpanel.Server{gameServer(backupServer), gameServer(second)},
		mutate: func(c *config.Config) {
			c.System.Backups.Format = config.BackupFormatRepository
			c.System.Backups.Repository.DedupScope = scope
		},
	})
	for _, srv := range []string{backupServer, second} {
		if _, err := tree.GameServer(n.serverDir(srv), treeMB<<20); err != nil {
			b.Fatal(err)
		}
	}
	repo := n.repoDir()
	sizes := []int64{}
	for _, srv := range []string{backupServer, second} {
		if st := n.backupOf(srv, newBackupID()); !st.Successful {
			b.Fatalf("backup of %s failed", srv)
		}
		sizes = append(sizes, repoUsage(b, repo))
	}
	tree.ChangeTwoPercent(b, tree.RegularFiles(b, n.serverDir(backupServer)), 1)
	if st := n.backupOf(backupServer, newBackupID()); !st.Successful {
		b.Fatal("second backup failed")
	}
	sizes = append(sizes, repoUsage(b, repo))
	// The copies per-server scope wrote are duplicates of blobs indexed in
	// the other server's packs: the next GC (after a delete, or at boot,
	// as here) drops them. Node-wide scope wrote none: nothing to wait for.
	n.stop()
	n.restart()
	after := repoUsage(b, repo)
	if scope == config.DedupScopeServer {
		wait.Until(3*time.Minute, func() bool {
			after = repoUsage(b, repo)
			return after <= sizes[2]-(sizes[1]-sizes[0])/2
		})
	}
	b.ReportMetric(inMiB(after), "after-boot-gc-MiB")
	b.ReportMetric(inMiB(sizes[0]), "after-server-1-MiB")
	b.ReportMetric(inMiB(sizes[1]), "after-server-2-MiB")
	b.ReportMetric(inMiB(sizes[2]), "after-server-1-again-MiB")
}
