package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/tree"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// benchLiveSharedCluster is benchSharedCluster with live transfers on.
func benchLiveSharedCluster(b *testing.B, id string, store *objectstore.Store, s3URL string, same bool) (*devpanel.Panel, *node, *node) {
	b.Helper()
	p := devpanel.New(clusterTokenID, clusterToken)
	p.PutServer(gameServer(id))
	ps := httptest.NewServer(p.Handler())
	b.Cleanup(ps.Close)
	base := "bench36l-" + newBackupID()[:8]
	start := func(name string, a *assignment) *node {
		c, cfgPath := clusterConfig(b, name, panelView(b, ps.URL, name, a).URL, func(name string, c *config.Config) {
			prefix := base + "/"
			if !same {
				prefix = base + "-" + name + "/"
			}
			c.System.Transfers.Live = true
			c.System.Backups.Format = config.BackupFormatRepository
			c.System.Backups.Repository.Shared = true
			c.System.Backups.Repository.S3 = config.BackupRepositoryS3{
				Endpoint: s3URL, Bucket: store.Bucket, Prefix: prefix, PathStyle: true,
				AccessKeyID: store.Access, SecretAccessKey: store.Secret,
			}
		})
		n := &node{t: b, URL: "http://127.0.0.1:" + strconv.Itoa(c.API.Port), Token: clusterToken, Config: c, CfgPath: cfgPath, log: &syncBuffer{}}
		b.Cleanup(n.stop)
		n.restart()
		return n
	}
	return p, start("source", &assignment{ids: map[string]bool{id: true}}), start("target", &assignment{ids: map[string]bool{}})
}

// BenchmarkLiveTransferByManifest (issue 36, the running transfer): a
// server of incompressible files (1 GiB; WHARF_BENCH_TREE_MB changes it)
// is backed up on the source, 2 % of it is added, the server is started,
// and it is transferred live to a target that shares the repository,
// then, side by side, between nodes whose repositories differ (today's
// live transfer, version 4). It reports the bytes from node to node (a
// counting proxy in front of the target), the bytes written to the
// bucket during the transfer (a counting proxy in front of versitygw),
// the wall time from the request to the target's success report, and the
// offline time (the source's log: from the stop to the end). The files
// arrive exact.
func BenchmarkLiveTransferByManifest(b *testing.B) {
	treeMB := int64(1024)
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
		treeMB = int64(v)
	}
	testimages.RequireDocker(b)
	testimages.GameServer(context.Background(), b)
	store := objectstore.StartOrSkip(b)
	s3URL, putBytes := putCounter(b, store.URL)
	offlineRx := regexp.MustCompile(`offline_ms=(\d+)`)
	for i := 0; i < b.N; i++ {
		for j, mbit := range benchLinks() {
			for _, same := range []bool{true, false} {
				id := fmt.Sprintf("7a0001%02d-0000-4000-8%03d-0000000001%02d", 40+i, j, 40+i)
				if !same {
					id = fmt.Sprintf("7a0001%02d-0000-4000-8%03d-0000000001%02d", 60+i, j, 60+i)
				}
				b.Cleanup(func() {
					_, _ = testimages.Client(b).ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
				})
				p, src, tgt := benchLiveSharedCluster(b, id, store, s3URL, same)
				dir := backedUpThenChanged(b, p, src, id, treeMB)
				src.power(id, "start")
				// Its first start sets the permissions of the 1 GiB first: a
				// while on a busy machine.
				wait.For(b, 10*time.Minute, func() bool { return src.details(id)["state"] == "running" }, "the server to run")
				proxy, sent := benchLinkProxy(b, tgt.URL, mbit)
				put0 := putBytes.Load()
				secs := transferTimed(b, p, src, tgt, id, proxy)
				m := offlineRx.FindStringSubmatch(src.log.String())
				if m == nil {
					b.Fatalf("no offline time in the source's log\n%s", src.log)
				}
				want, err := tree.Snapshot(dir)
				if err != nil {
					b.Fatal(err)
				}
				got, err := tree.Snapshot(filepath.Join(tgt.Config.System.Data, id))
				if err != nil {
					b.Fatal(err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					b.Fatalf("tree differs (-source +target):\n%s", diff)
				}
				mode := "shared repository (live by manifest)"
				if !same {
					mode = "different repositories (live, version 4)"
				}
				if same != strings.Contains(src.log.String(), "live transfer by manifest") {
					b.Fatalf("%s: the source's log does not say so\n%s", mode, src.log)
				}
				server := float64(treeMB<<20) * 1.02
				b.Logf("%s, %s: node-to-node %d bytes (%.3f %% of the server), written to the bucket %.1f MiB, wall %.1f s, offline %s ms",
					linkName(mbit), mode, sent.Load(), 100*float64(sent.Load())/server, float64(putBytes.Load()-put0)/(1<<20), secs, m[1])
			}
		}
	}
}
