package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/tokens"
)

// BenchmarkTransferBackupsByReference (issue 36): a server of
// incompressible files (256 MiB; WHARF_BENCH_TREE_MB changes it) with
// three repository backups, each after 2 % of it was added, is transferred
// stopped with the three backups selected to a target sharing the
// repository. It reports the bytes from node to node (a counting proxy in
// front of the target) and the wall time from the request to the target's
// success report. Run once per binary (WHARF_E2E_BINARY: the reference
// sends the backups as generated archives).
func BenchmarkTransferBackupsByReference(b *testing.B) {
	treeMB := int64(256)
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
		treeMB = int64(v)
	}
	testimages.RequireDocker(b)
	testimages.GameServer(context.Background(), b)
	store := objectstore.StartOrSkip(b)
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("7a0000%02d-0000-4000-8000-0000000000%02d", 80+i, 80+i)
		b.Cleanup(func() {
			_, _ = testimages.Client(b).ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
		})
		p, src, tgt := benchSharedCluster(b, id, store, store.URL, true)
		dir := filepath.Join(src.Config.System.Data, id)
		incompressible(b, dir, treeMB<<20)
		var backups []string
		for k := range 3 {
			change := make([]byte, treeMB<<20/50)
			_, _ = rand.Read(change)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("day-%d.bin", k)), change, 0o644); err != nil {
				b.Fatal(err)
			}
			backupID := newBackupID()
			res, body := src.request("POST", "/api/servers/"+id+"/backup", map[string]any{"adapter": "wings", "uuid": backupID, "ignore": ""}, "")
			if res.StatusCode != 202 {
				b.Fatalf("backup: %d %s", res.StatusCode, body)
			}
			if call, ok := p.WaitForCall("POST", "/backups/"+backupID, 10*time.Minute); !ok || !strings.Contains(string(call.Body), `"successful":true`) {
				b.Fatalf("the backup failed\n%s", src.log)
			}
			backups = append(backups, backupID)
		}
		proxy, sent := countingProxy(b, tgt.URL)
		jwt, err := tokens.Sign([]byte(clusterToken), map[string]any{"sub": id, "exp": time.Now().Add(time.Hour).Unix()})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		res, body := src.request("POST", "/api/servers/"+id+"/transfer", map[string]any{"url": proxy + "/api/transfers", "token": "Bearer " + jwt, "backups": backups}, "")
		if res.StatusCode != 202 {
			b.Fatalf("transfer: %d %s", res.StatusCode, body)
		}
		if _, ok := p.WaitForCall("POST", "/servers/"+id+"/transfer/success", 10*time.Minute); !ok {
			b.Fatalf("no success reported\nSOURCE:\n%s\nTARGET:\n%s", src.log, tgt.log)
		}
		secs := time.Since(start).Seconds()
		server := float64(treeMB<<20) * 1.06
		b.Logf("server %.0f MiB with 3 backups: node-to-node %d bytes (%.4f %% of the server), wall (= offline) %.1f s",
			server/(1<<20), sent.Load(), 100*float64(sent.Load())/server, secs)
	}
}
