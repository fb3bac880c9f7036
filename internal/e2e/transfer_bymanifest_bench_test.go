package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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
	"github.com/wharf/wharf/internal/tokens"
)

// putCounter is a proxy in front of the S3 server that counts the bytes
// of PUT bodies (what the nodes write to the bucket). The Host header is
// kept: it is part of the requests' signatures.
func putCounter(tb testing.TB, target string) (string, *atomic.Int64) {
	tb.Helper()
	up, _ := url.Parse(target)
	var n atomic.Int64
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(up)
		pr.Out.Host = pr.In.Host
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			r.Body = countBody{r.Body, &n}
		}
		rp.ServeHTTP(w, r)
	}))
	tb.Cleanup(srv.Close)
	return srv.URL, &n
}

// benchSharedCluster starts a source and a target whose repositories are
// in store's bucket through s3URL, shared: under one prefix (same) or
// each under its own.
func benchSharedCluster(b *testing.B, id string, store *objectstore.Store, s3URL string, same bool) (*devpanel.Panel, *node, *node) {
	b.Helper()
	p := devpanel.New(clusterTokenID, clusterToken)
	p.PutServer(gameServer(id))
	ps := httptest.NewServer(p.Handler())
	b.Cleanup(ps.Close)
	base := "bench36-" + newBackupID()[:8]
	start := func(name string, a *assignment) *node {
		c, cfgPath := clusterConfig(b, name, panelView(b, ps.URL, name, a).URL, func(name string, c *config.Config) {
			prefix := base + "/"
			if !same {
				prefix = base + "-" + name + "/"
			}
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

// incompressible fills dir with files of random bytes, size in all.
func incompressible(b *testing.B, dir string, size int64) {
	b.Helper()
	const file = 16 << 20
	buf := make([]byte, file)
	for i := int64(0); i*file < size; i++ {
		_, _ = rand.Read(buf)
		p := filepath.Join(dir, fmt.Sprintf("world/region-%03d.bin", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, buf[:min(file, size-i*file)], 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTransferByManifest (issue 36): a server of incompressible files
// (1 GiB; WHARF_BENCH_TREE_MB changes it) is backed up on the source, 2 %
// of it is added, and it is transferred stopped (live transfers off) to a
// target that shares the repository, then, side by side, between nodes
// whose repositories differ (today's classic transfer). It reports the
// bytes that went from node to node (a counting proxy in front of the
// target), the bytes written to the bucket during the transfer (a
// counting proxy in front of versitygw), and the wall time from the
// request to the target's success report, which is the server's offline
// time (a stopped transfer stops it first). The files arrive exact.
func BenchmarkTransferByManifest(b *testing.B) {
	treeMB := int64(1024)
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
		treeMB = int64(v)
	}
	testimages.RequireDocker(b)
	testimages.GameServer(context.Background(), b)
	store := objectstore.StartOrSkip(b)
	s3URL, putBytes := putCounter(b, store.URL)
	for i := 0; i < b.N; i++ {
		for j, mbit := range benchLinks() {
			for _, same := range []bool{true, false} {
				id := fmt.Sprintf("7a0000%02d-0000-4000-8%03d-0000000000%02d", 40+i, j, 40+i)
				if !same {
					id = fmt.Sprintf("7a0000%02d-0000-4000-8%03d-0000000000%02d", 60+i, j, 60+i)
				}
				b.Cleanup(func() {
					_, _ = testimages.Client(b).ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
				})
				p, src, tgt := benchSharedCluster(b, id, store, s3URL, same)
				dir := backedUpThenChanged(b, p, src, id, treeMB)
				want, err := tree.Snapshot(dir)
				if err != nil {
					b.Fatal(err)
				}
				proxy, sent := benchLinkProxy(b, tgt.URL, mbit)
				put0 := putBytes.Load()
				secs := transferTimed(b, p, src, tgt, id, proxy)
				got, err := tree.Snapshot(filepath.Join(tgt.Config.System.Data, id))
				if err != nil {
					b.Fatal(err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					b.Fatalf("tree differs (-source +target):\n%s", diff)
				}
				mode := "shared repository (by manifest)"
				if !same {
					mode = "different repositories (classic)"
				}
				server := float64(treeMB<<20) * 1.02
				b.Logf("%s, %s: node-to-node %d bytes (%.3f %% of the server), written to the bucket %.1f MiB, wall (= offline) %.1f s",
					linkName(mbit), mode, sent.Load(), 100*float64(sent.Load())/server, float64(putBytes.Load()-put0)/(1<<20), secs)
			}
		}
	}
}

// backedUpThenChanged fills the server id's directory on src with treeMB
// MiB of incompressible files, backs it up and waits for the panel to hear
// of the backup's success, then adds a file of 2 % of that size (the day's
// change of the issue 36 benchmarks); it returns the directory.
func backedUpThenChanged(b *testing.B, p *devpanel.Panel, src *node, id string, treeMB int64) string {
	b.Helper()
	dir := filepath.Join(src.Config.System.Data, id)
	incompressible(b, dir, treeMB<<20)
	backupID := newBackupID()
	res, body := src.request("POST", "/api/servers/"+id+"/backup", map[string]any{"adapter": "wings", "uuid": backupID, "ignore": ""}, "")
	if res.StatusCode != 202 {
		b.Fatalf("backup: %d %s", res.StatusCode, body)
	}
	if call, ok := p.WaitForCall("POST", "/backups/"+backupID, 10*time.Minute); !ok || !strings.Contains(string(call.Body), `"successful":true`) {
		b.Fatalf("the backup failed\n%s", src.log)
	}
	change := make([]byte, treeMB<<20/50)
	_, _ = rand.Read(change)
	if err := os.WriteFile(filepath.Join(dir, "day.bin"), change, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// transferTimed asks src to transfer server id to the target behind proxy,
// waits for the panel to hear of the success and for the source to
// complete, and returns the seconds from the request to the success.
func transferTimed(b *testing.B, p *devpanel.Panel, src, tgt *node, id, proxy string) float64 {
	b.Helper()
	jwt, err := tokens.Sign([]byte(clusterToken), map[string]any{"sub": id, "exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	res, body := src.request("POST", "/api/servers/"+id+"/transfer", map[string]any{"url": proxy + "/api/transfers", "token": "Bearer " + jwt}, "")
	if res.StatusCode != 202 {
		b.Fatalf("transfer: %d %s", res.StatusCode, body)
	}
	if _, ok := p.WaitForCall("POST", "/servers/"+id+"/transfer/success", 10*time.Minute); !ok {
		b.Fatalf("no success reported\nSOURCE:\n%s\nTARGET:\n%s", src.log, tgt.log)
	}
	secs := time.Since(start).Seconds()
	wait.For(b, time.Minute, func() bool { return strings.Contains(src.log.String(), "status=completed") }, "the source to complete")
	return secs
}
