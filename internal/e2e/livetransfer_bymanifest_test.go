package e2e

import (
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// Live transfers by manifest (issue 36): the nodes share the repository
// and speak live transfers; the server runs on the source.

// liveShared turns live transfers on for the nodes of a shared cluster.
func liveShared(store *objectstore.Store, prefix func(name string) string, endpoint func(name string) string) func(string, *config.Config) {
	return func(name string, c *config.Config) {
		c.System.Transfers.Live = true
		c.System.Backups.Format = config.BackupFormatRepository
		c.System.Backups.Repository.Shared = true
		c.System.Backups.Repository.S3 = config.BackupRepositoryS3{
			Endpoint: endpoint(name), Bucket: store.Bucket, Prefix: prefix(name), PathStyle: true,
			AccessKeyID: store.Access, SecretAccessKey: store.Secret,
		}
	}
}

// noTransferSnapshot waits for the bucket to hold no transfer snapshot of id.
func noTransferSnapshot(t *testing.T, store *objectstore.Store, id string) {
	t.Helper()
	wait.For(t, 30*time.Second, func() bool {
		for k := range (&s3Repo{store: store}).objects(t) {
			if strings.Contains(k, "/snapshots/"+id+"/transfer-") {
				return false
			}
		}
		return true
	}, "the transfer snapshot to leave the bucket")
}

// runningOn starts the server on n and waits for the game to be up.
func runningOn(n *node, id string) {
	n.t.Helper()
	n.power(id, "start")
	n.waitLog(id, "Done (")
}

// TestLiveTransferByManifest: after a backup and a 2 % change, a live
// transfer of the running server between nodes sharing the repository
// sends the files by the snapshot (only the chunks the bucket lacks go to
// the bucket) and over the wire only the snapshot's name, the seeds and
// what changed: the bytes through a counting proxy in front of the target
// are at most 10 % of the server, the files arrive exact, the server runs
// on the target, and the transfer snapshot leaves the bucket.
func TestLiveTransferByManifest(t *testing.T) {
	id := processID("7a000046-0000-4000-8000-000000000046")
	store := objectstore.StartOrSkip(t)
	base := "live36-" + newBackupID()[:8] + "/"
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, liveShared(store,
		func(string) string { return base }, func(string) string { return store.URL }))
	_, size := serverFill(t, c, id)
	runningOn(c.Source, id)
	proxy, sent := countingProxy(t, c.Target.URL)
	c.transferThrough(t, id, proxy)
	c.Source.waitDaemonLog(`the target shares the backup repository: live transfer by manifest`, 10*time.Second)
	c.Source.waitDaemonLog(`msg="the target speaks live transfers" server=`+id+` direction=outgoing version=5`, 10*time.Second)
	c.Source.waitDaemonLog(`msg="transfer completed" server=`+id+` direction=outgoing live=true offline=`, 10*time.Second)
	c.Target.waitDaemonLog(`msg="live transfer snapshot extracted from the shared repository" server=`+id, 10*time.Second)
	// The server runs until the target has restored the snapshot.
	log := c.Source.log.String()
	restoring, stopping := strings.Index(log, "Waiting for the destination to restore the snapshot"), strings.Index(log, "Stopping the server to send the last changes")
	if restoring < 0 || stopping < restoring || strings.Contains(log, "did not say that it restored") {
		t.Fatalf("the source stopped the server before the target said it restored the snapshot\n%s", log)
	}
	// Nothing writes after the stop: the source's tree is the one sent.
	if diff := cmp.Diff(snap(t, c.Source.dataDir(id)), snap(t, c.Target.dataDir(id))); diff != "" {
		t.Fatalf("tree differs (-source +target):\n%s", diff)
	}
	if n := sent.Load(); n > size/10 {
		t.Fatalf("%d bytes went to the target, more than 10 %% of the %d-byte server", n, size)
	}
	t.Logf("bytes to the target: %d for a %d-byte server", sent.Load(), size)
	if got, want := c.Target.statuses(id), []string{"pending", "processing", "completed"}; !slices.Equal(got, want) {
		t.Fatalf("target statuses %v, want %v", got, want)
	}
	noTransferSnapshot(t, store, id)
	runningOn(c.Target, id)
	if st := c.Target.details(id)["state"]; st != "running" {
		t.Fatalf("the server on the target: %v", st)
	}
}

// TestLiveTransferByManifestFallsBack: the nodes share a repository each,
// not the same one: today's live transfer (version 4) runs, the whole
// server goes through the proxy, and the files arrive exact.
func TestLiveTransferByManifestFallsBack(t *testing.T) {
	id := processID("7a000047-0000-4000-8000-000000000047")
	store := objectstore.StartOrSkip(t)
	base := "live36f-" + newBackupID()[:8]
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, liveShared(store,
		func(name string) string { return base + "-" + name + "/" }, func(string) string { return store.URL }))
	_, size := serverFill(t, c, id)
	runningOn(c.Source, id)
	proxy, sent := countingProxy(t, c.Target.URL)
	c.transferThrough(t, id, proxy)
	c.Source.waitDaemonLog(`msg="the target speaks live transfers" server=`+id+` direction=outgoing version=4`, 10*time.Second)
	if strings.Contains(c.Source.log.String(), "by manifest") {
		t.Fatal("the source transferred by manifest to a target with another repository")
	}
	if diff := cmp.Diff(snap(t, c.Source.dataDir(id)), snap(t, c.Target.dataDir(id))); diff != "" {
		t.Fatalf("tree differs (-source +target):\n%s", diff)
	}
	if n := sent.Load(); n < size/2 {
		t.Fatalf("only %d bytes went to the target for a %d-byte server: not today's live transfer", n, size)
	}
}

// TestLiveTransferByManifestBucketFails: the bucket stops answering the
// target's reads of packs while it restores the snapshot, then the
// source's writes while it stores it: each live transfer fails cleanly
// (failed on the source, and on the target when it had begun; the server
// still running on the source; nothing kept on the target; the transfer
// snapshot gone from the bucket). Once the bucket answers again, the same
// transfer goes by manifest and the files arrive exact (the control).
func TestLiveTransferByManifestBucketFails(t *testing.T) {
	id := processID("7a000048-0000-4000-8000-000000000048")
	store := objectstore.StartOrSkip(t)
	var srcPuts, tgtPacks atomic.Bool
	srcURL := failingS3(t, store.URL, func(r *http.Request) bool { return srcPuts.Load() && r.Method == http.MethodPut })
	tgtURL := failingS3(t, store.URL, func(r *http.Request) bool {
		return tgtPacks.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/packs/")
	})
	prefix := "live36b-" + newBackupID()[:8] + "/"
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, func(name string, cfg *config.Config) {
		liveShared(store, func(string) string { return prefix }, func(name string) string {
			if name == "target" {
				return tgtURL
			}
			return srcURL
		})(name, cfg)
		cfg.System.Backups.Repository.S3.MaxAttempts = 1
	})
	serverFill(t, c, id)
	runningOn(c.Source, id)
	failed := func(n *node, k int) {
		t.Helper()
		wait.For(t, 60*time.Second, func() bool {
			return countOf(n.statuses(id), "failed") == k
		}, "transfer %d to end failed\n%s", k, n.log)
	}
	stillRunning := func() {
		t.Helper()
		if st := c.Source.details(id)["state"]; st != "running" {
			t.Fatalf("the server on the source after the failure: %v\n%s", st, c.Source.log)
		}
		if strings.Contains(c.Source.log.String(), "Stopping the server to send the last changes") {
			t.Fatal("the source stopped the server")
		}
	}

	// The target cannot read the snapshot's packs: it fails, answers,
	// and the source fails with the server running.
	tgtPacks.Store(true)
	c.startTransfer(id)
	c.waitReports(c.Source, id, []string{"failure"}, 60*time.Second)
	failed(c.Source, 1)
	failed(c.Target, 1)
	c.Source.waitDaemonLog(`live transfer by manifest`, 10*time.Second)
	c.Target.waitDaemonLog(`server=`+id+` direction=incoming.*the transfer snapshot`, 10*time.Second)
	c.Target.assertGone(id)
	stillRunning()
	noTransferSnapshot(t, store, id)
	tgtPacks.Store(false)

	// The source cannot store the snapshot: it fails before the target
	// hears of the transfer.
	srcPuts.Store(true)
	c.startTransfer(id)
	c.waitReports(c.Source, id, []string{"failure", "failure"}, 60*time.Second)
	failed(c.Source, 2)
	c.Target.assertGone(id)
	stillRunning()
	srcPuts.Store(false)

	// The control: the same transfer once the bucket answers.
	c.startTransfer(id)
	c.waitReports(c.Target, id, []string{"failure", "success"}, 120*time.Second)
	c.Source.waitDaemonLog(`server=`+id+` direction=outgoing status=completed`, 30*time.Second)
	if diff := cmp.Diff(snap(t, c.Source.dataDir(id)), snap(t, c.Target.dataDir(id))); diff != "" {
		t.Fatalf("tree differs (-source +target):\n%s", diff)
	}
	noTransferSnapshot(t, store, id)
}

func countOf(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// TestLiveTransferByManifestOlderTarget: the nodes share the repository
// but the target is a Wharf of wire version 4 (its offer, rewritten by a
// proxy, names the repository without version 5, as main before this
// change does): today's live transfer (version 4) runs, the whole server
// crosses, the files arrive exact.
func TestLiveTransferByManifestOlderTarget(t *testing.T) {
	id := processID("7a000049-0000-4000-8000-000000000049")
	store := objectstore.StartOrSkip(t)
	base := "live36o-" + newBackupID()[:8] + "/"
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, liveShared(store,
		func(string) string { return base }, func(string) string { return store.URL }))
	_, size := serverFill(t, c, id)
	runningOn(c.Source, id)
	v4 := startLiveProxy(t, c.Target.URL, 4)
	c.transferThrough(t, id, v4.URL)
	c.Source.waitDaemonLog(`msg="the target speaks live transfers" server=`+id+` direction=outgoing version=4`, 10*time.Second)
	if strings.Contains(c.Source.log.String(), "by manifest") {
		t.Fatal("the source transferred by manifest to a target of version 4")
	}
	if diff := cmp.Diff(snap(t, c.Source.dataDir(id)), snap(t, c.Target.dataDir(id))); diff != "" {
		t.Fatalf("tree differs (-source +target):\n%s", diff)
	}
	if n := v4.posted.Load(); n < size/2 {
		t.Fatalf("only %d bytes went to the target for a %d-byte server: not today's live transfer", n, size)
	}
}
