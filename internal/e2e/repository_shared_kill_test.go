package e2e

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// killLeaseTTLMS is the nodes' lease expiry in the kill -9 tests
// (testing.repository_lease_ttl_ms, test builds only; the skew bound is 0
// then): a killed node's lease stays live for up to 8 s, long enough for
// the survivor to see it, short enough not to wait a minute and a half.
const killLeaseTTLMS = 8000

// holdS3 is a proxy in front of the S3 server that holds the requests
// match selects, once armed, until the client goes away (the node is
// killed) or the test ends; held is closed at the first one held.
type holdS3 struct {
	URL   string
	mu    sync.Mutex
	match func(*http.Request) bool
	held  chan struct{}
	once  sync.Once
	done  chan struct{}
	rel   chan struct{} // closed by release: held requests answer 503
	relo  sync.Once
}

func newHoldS3(t *testing.T, target string) *holdS3 {
	t.Helper()
	up, _ := url.Parse(target)
	h := &holdS3{held: make(chan struct{}), done: make(chan struct{}), rel: make(chan struct{})}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(up)
		pr.Out.Host = pr.In.Host // signed
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		m := h.match
		h.mu.Unlock()
		if m != nil && m(r) {
			h.once.Do(func() { close(h.held) })
			select {
			case <-r.Context().Done():
			case <-h.done:
			case <-h.rel:
			}
			http.Error(w, "<Error><Code>ServiceUnavailable</Code></Error>", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		close(h.done)
		srv.Close()
	})
	h.URL = srv.URL
	return h
}

// arm makes the proxy hold the requests match selects.
func (h *holdS3) arm(match func(*http.Request) bool) {
	h.mu.Lock()
	h.match = match
	h.mu.Unlock()
}

// release answers the requests held (503) and holds no more.
func (h *holdS3) release() {
	h.arm(nil)
	h.relo.Do(func() { close(h.rel) })
}

// killNode is a node of a shared repository (in-memory runtime) reaching
// the bucket through endpoint, with debug logs (its deferred collections
// are logged) and short leases.
func killNode(t *testing.T, store *objectstore.Store, endpoint, prefix string) *s3Repo {
	t.Helper()
	n := startNode(t, nodeOptions{
		fake:    true,
		servers: []devpanel.Server{gameServer(backupServer)},
		mutate: func(c *config.Config) {
			c.UUID = uuid.NewString()
			c.Debug = true
			c.Testing.RepositoryLeaseTTLMS = killLeaseTTLMS
			c.System.Backups.Format = config.BackupFormatRepository
			c.System.Backups.Repository.Shared = true
			c.System.Backups.Repository.MaxUnusedPercent = 0
			c.System.Backups.Repository.S3 = config.BackupRepositoryS3{
				Endpoint: endpoint, Bucket: store.Bucket, Prefix: prefix, PathStyle: true,
				AccessKeyID: store.Access, SecretAccessKey: store.Secret, MaxAttempts: 1,
			}
		},
	})
	return &s3Repo{node: n, store: store, prefix: prefix}
}

// leaseExpiry is the expiry written in node's lease under kind ("writers"
// or "gc"); ok false when there is none.
func (r *s3Repo) leaseExpiry(t *testing.T, kind string, node *s3Repo) (time.Time, bool) {
	t.Helper()
	b := r.getIfExists(t, "locks/"+kind+"/"+node.Config.UUID)
	if b == nil {
		return time.Time{}, false
	}
	var l struct{ Expires time.Time }
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("lease %s of %s: %v", kind, node.Config.UUID, err)
	}
	return l.Expires, true
}

// TestRepositorySharedKill9 (issue 36): two real daemons share one bucket
// and prefix, with leases of 8 s (testing.repository_lease_ttl_ms). One
// node (the victim) is killed with SIGKILL in the middle of its backup or
// of its collection: a proxy in front of the bucket holds its first write
// of a pack (backup) or its first delete of a pack or index object
// (collection). The control: at the kill the victim's lease of that kind
// is in the bucket and the step's result is not (no manifest of the
// backup; the deleted backup's chunks still packed). Then the other node
// (the survivor): its backups restore exactly; its collection (it deletes
// a backup) is deferred while the victim's lease is live (its log) and runs
// once it expired (the deleted backup's chunks leave the bucket). The
// victim restarts: its kept backup restores exactly and it backs up again.
// Each case runs with the first node started as the victim and with the
// second (the reverse roles).
func TestRepositorySharedKill9(t *testing.T) {
	store := objectstore.StartOrSkip(t)
	for _, step := range []string{"backup", "gc"} {
		for _, victimFirst := range []bool{true, false} {
			name := step + "/victim-second"
			if victimFirst {
				name = step + "/victim-first"
			}
			t.Run(name, func(t *testing.T) { sharedKill9(t, store, step, victimFirst) })
		}
	}
}

func sharedKill9(t *testing.T, store *objectstore.Store, step string, victimFirst bool) {
	prefix := "kill36-" + newBackupID()[:8] + "/"
	hold := newHoldS3(t, store.URL)
	var victim, survivor *s3Repo
	big := randomBytes(6 << 20)
	start := func(v bool) {
		if v {
			victim = killNode(t, store, hold.URL, prefix)
			writeFiles(t, victim.serverDir(backupServer), map[string]string{"v.txt": "victim", "world/r.bin": big, "only-v.bin": randomBytes(2 << 20)})
		} else {
			survivor = killNode(t, store, store.URL, prefix)
			writeFiles(t, survivor.serverDir(backupServer), map[string]string{"s.txt": "survivor", "world/r.bin": big})
		}
	}
	start(victimFirst)
	start(!victimFirst)
	wantV := contentTree(t, victim.serverDir(backupServer), false)
	wantS := contentTree(t, survivor.serverDir(backupServer), false)
	v1, s1 := newBackupID(), newBackupID()
	for _, b := range []struct {
		n  *s3Repo
		id string
	}{{victim, v1}, {survivor, s1}} {
		if st := b.n.backup(b.id, "local", ""); !st.Successful {
			t.Fatalf("backup failed\n%s", b.n.log)
		}
	}
	survivor.checkDownload(t, s1, wantS) // its index names the victim's packs
	victim.checkDownload(t, v1, wantV)
	// A survivor's backup of its own data, deleted after the kill: its
	// collection must wait for the victim's lease.
	writeFiles(t, survivor.serverDir(backupServer), map[string]string{"s-extra.bin": randomBytes(3 << 20)})
	s2 := newBackupID()
	if st := survivor.backup(s2, "local", ""); !st.Successful {
		t.Fatalf("backup failed\n%s", survivor.log)
	}
	onlyS2 := survivor.manifestChunks(t, s2)
	for h := range survivor.manifestChunks(t, s1) {
		delete(onlyS2, h)
	}
	if err := os.Remove(filepath.Join(survivor.serverDir(backupServer), "s-extra.bin")); err != nil {
		t.Fatal(err)
	}

	var kind string
	switch step {
	case "backup":
		kind = "writers"
		writeFiles(t, victim.serverDir(backupServer), map[string]string{"new.bin": randomBytes(24 << 20)})
		hold.arm(func(r *http.Request) bool {
			return r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/packs/")
		})
		v2 := newBackupID()
		if res, body := victim.request("POST", "/api/servers/"+backupServer+"/backup", map[string]any{"adapter": "local", "uuid": v2, "ignore": ""}, ""); res.StatusCode != 202 {
			t.Fatalf("backup: %d %s", res.StatusCode, body)
		}
		waitHeld(t, hold, victim)
		if victim.getIfExists(t, "snapshots/"+backupServer+"/"+v2+".json") != nil {
			t.Fatal("the control: the victim's backup has a manifest at the kill")
		}
	case "gc":
		kind = "gc"
		writeFiles(t, victim.serverDir(backupServer), map[string]string{"gone.bin": randomBytes(3 << 20)})
		v2 := newBackupID()
		if st := victim.backup(v2, "local", ""); !st.Successful {
			t.Fatalf("backup failed\n%s", victim.log)
		}
		onlyV2 := victim.manifestChunks(t, v2)
		for h := range victim.manifestChunks(t, v1) {
			delete(onlyV2, h)
		}
		hold.arm(func(r *http.Request) bool {
			return r.Method == http.MethodDelete && (strings.Contains(r.URL.Path, "/packs/") || strings.Contains(r.URL.Path, "/index/"))
		})
		if res, body := victim.request("DELETE", "/api/servers/"+backupServer+"/backup/"+v2, nil, ""); res.StatusCode != 204 {
			t.Fatalf("delete: %d %s", res.StatusCode, body)
		}
		waitHeld(t, hold, victim)
		blobs := victim.packedBlobs(t)
		kept := 0
		for h := range onlyV2 {
			if blobs[h] {
				kept++
			}
		}
		if kept == 0 {
			t.Fatal("the control: the deleted backup's chunks are gone before the kill: the collection was not stopped mid-way")
		}
	}
	if _, ok := victim.leaseExpiry(t, kind, victim); !ok {
		t.Fatalf("the control: the victim holds no %s lease at the kill", kind)
	}
	victim.kill9()
	killedAt := len(survivor.log.String())
	hold.arm(nil)

	// The survivor collects: deferred while the victim's lease is live.
	if res, body := survivor.request("DELETE", "/api/servers/"+backupServer+"/backup/"+s2, nil, ""); res.StatusCode != 204 {
		t.Fatalf("delete: %d %s", res.StatusCode, body)
	}
	wait.For(t, 30*time.Second, func() bool {
		return strings.Contains(survivor.log.String()[killedAt:], "backup repository garbage collection deferred")
	}, "the survivor's collection to be deferred by the victim's lease\n%s", survivor.log)
	wait.For(t, 90*time.Second, func() bool {
		blobs := survivor.packedBlobs(t)
		for h := range onlyS2 {
			if blobs[h] {
				return false
			}
		}
		return true
	}, "the survivor's collection to run once the victim's lease expired\n%s", survivor.log)
	if exp, ok := survivor.leaseExpiry(t, kind, victim); ok && time.Now().Before(exp) {
		t.Fatalf("the victim's %s lease (expiry %v) had not expired when the survivor collected", kind, exp)
	}
	survivor.checkDownload(t, s1, wantS)
	survivor.restoreTruncate(t, s1)
	sameTree(t, "the survivor's restore", onlyFiles(wantS), onlyFiles(contentTree(t, survivor.serverDir(backupServer), false)))

	victim.restart()
	victim.checkDownload(t, v1, wantV)
	victim.restoreTruncate(t, v1)
	sameTree(t, "the victim's restore after its restart", onlyFiles(wantV), onlyFiles(contentTree(t, victim.serverDir(backupServer), false)))
	v3 := newBackupID()
	if st := victim.backup(v3, "local", ""); !st.Successful {
		t.Fatalf("the victim's backup after its restart failed\n%s", victim.log)
	}
	victim.checkDownload(t, v3, wantV)
	survivor.checkDownload(t, s1, wantS)
}

// packBytes is the bytes of the repository's packs in the bucket.
func (r *s3Repo) packBytes(t *testing.T) int64 {
	t.Helper()
	var n int64
	for k, size := range r.objects(t) {
		if strings.HasPrefix(k, r.prefix+"packs/") {
			n += size
		}
	}
	return n
}

// waitHeld waits until the proxy holds a request of the victim.
func waitHeld(t *testing.T, h *holdS3, victim *s3Repo) {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(60 * time.Second):
		t.Fatalf("the victim made no request the proxy holds\n%s", victim.log)
	}
}

// TestRepositorySharedKill9DuringTransferByManifest (issue 36): a transfer
// by manifest between two real daemons sharing a bucket (leases of 8 s),
// and a SIGKILL of either node in its middle. The target, killed while it
// reads the snapshot's packs (a proxy holds its first read): the source's
// transfer fails, its collection of the deleted snapshot is deferred while
// the target's writer lease is live and runs once it expired (the
// snapshot's own chunks leave the bucket), its backup restores exactly on
// it, and after the target's restart a transfer goes by manifest with the
// files exact. The source, killed while it writes the snapshot (its first
// pack write held): the target keeps nothing, and after the source's
// restart its backup restores exactly and the transfer goes by manifest
// with the files exact. The control of each: at the kill, the killed
// node's writer lease is in the bucket, and the step's result is not (the
// source has no answer; no snapshot manifest).
func TestRepositorySharedKill9DuringTransferByManifest(t *testing.T) {
	store := objectstore.StartOrSkip(t)
	for _, victim := range []string{"target", "source", "source-while-target-reads"} {
		t.Run("kill-"+victim, func(t *testing.T) { transferKill9(t, store, victim) })
	}
}

func transferKill9(t *testing.T, store *objectstore.Store, victimName string) {
	id := "7a00003b-0000-4000-8000-00000000003b"
	// The node whose requests the proxy holds: the victim, but for a
	// source killed while the target reads the snapshot (the target's
	// reads are held).
	heldName := victimName
	switch victimName {
	case "source":
		id = "7a00003c-0000-4000-8000-00000000003c"
	case "source-while-target-reads":
		id, heldName = "7a00003d-0000-4000-8000-00000000003d", "target"
	}
	hold := newHoldS3(t, store.URL)
	prefix := "killx36-" + newBackupID()[:8] + "/"
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, func(name string, cfg *config.Config) {
		endpoint := store.URL
		if name == heldName {
			endpoint = hold.URL
		}
		cfg.Debug = true
		cfg.Testing.RepositoryLeaseTTLMS = killLeaseTTLMS
		cfg.System.Backups.Format = config.BackupFormatRepository
		cfg.System.Backups.Repository.Shared = true
		cfg.System.Backups.Repository.S3 = config.BackupRepositoryS3{
			Endpoint: endpoint, Bucket: store.Bucket, Prefix: prefix, PathStyle: true,
			AccessKeyID: store.Access, SecretAccessKey: store.Secret, MaxAttempts: 1,
		}
	})
	repo := &s3Repo{store: store, prefix: prefix}
	victim, survivor := c.Target, c.Source
	if victimName != "target" {
		victim, survivor = c.Source, c.Target
	}
	fill(t, c.Source, id, 16<<20)
	b1 := newBackupID()
	c.backupOnSource(t, id, b1)
	atBackup := relTree(t, c.Source.dataDir(id))
	writeFiles(t, c.Source.dataDir(id), map[string]string{"changed/after-backup.bin": randomBytes(1 << 20)})

	if heldName == "target" {
		hold.arm(func(r *http.Request) bool {
			return r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/packs/")
		})
	} else {
		hold.arm(func(r *http.Request) bool {
			return r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/packs/")
		})
	}
	c.startTransfer(id)
	select {
	case <-hold.held:
	case <-time.After(90 * time.Second):
		t.Fatalf("the %s made no request the proxy holds\nSOURCE:\n%s\nTARGET:\n%s", victimName, c.Source.log, c.Target.log)
	}
	if repo.getIfExists(t, "locks/writers/"+victim.Config.UUID) == nil {
		t.Fatalf("the control: the %s holds no writer lease at the kill", victimName)
	}
	if r := c.reports(c.Source, id); len(r) > 0 {
		t.Fatalf("the control: the source reported %v before the kill", r)
	}
	snapshots := func() int {
		n := 0
		for k := range repo.objects(t) {
			if strings.Contains(k, "/snapshots/"+id+"/transfer-") {
				n++
			}
		}
		return n
	}
	if victimName == "source" && snapshots() > 0 {
		t.Fatal("the control: the snapshot's manifest is stored before the kill")
	}
	// The control of the source killed while the target reads: its
	// snapshot's manifest is in the bucket (the target read it).
	var packsAtKill int64
	if victimName == "source-while-target-reads" {
		if snapshots() != 1 {
			t.Fatalf("the control: %d transfer snapshots in the bucket at the kill, want 1", snapshots())
		}
		packsAtKill = repo.packBytes(t)
	}
	killedAt := len(survivor.log.String())
	victim.kill9()
	hold.release()

	if victimName == "target" {
		c.waitReports(c.Source, id, []string{"failure"}, 60*time.Second)
		wait.For(t, 30*time.Second, func() bool {
			return strings.Contains(c.Source.log.String()[killedAt:], "backup repository garbage collection deferred")
		}, "the source's collection to be deferred by the killed target's lease\n%s", c.Source.log)
		gc := regexp.MustCompile(`backup repository garbage collection" chunks_removed=[1-9]`)
		wait.For(t, 90*time.Second, func() bool { return gc.MatchString(c.Source.log.String()[killedAt:]) },
			"the source's collection to run once the target's lease expired\n%s", c.Source.log)
		if exp, ok := repo.leaseExpiry(t, "writers", &s3Repo{node: victim}); ok && time.Now().Before(exp) {
			t.Fatalf("the target's lease (expiry %v) had not expired when the source collected", exp)
		}
		if snapshots() != 0 {
			t.Fatal("the transfer snapshot is still in the bucket")
		}
	} else {
		survivor.assertGone(id)
	}
	victim.restart()
	if victimName == "target" {
		c.Target.assertGone(id)
	}
	if victimName == "source-while-target-reads" {
		// The rule (docs/backup-repository.md "Transfer snapshots of a
		// transfer that is over"): no transfer holds the snapshot any
		// more, so the restarted source's collection (at boot, once no
		// other node holds a lease) deletes it, and the space of the
		// chunks only it named (the 1 MiB changed since the backup) comes
		// back.
		wait.For(t, 90*time.Second, func() bool { return snapshots() == 0 },
			"the stale transfer snapshot to leave the bucket\nSOURCE:\n%s\nTARGET:\n%s", c.Source.log, c.Target.log)
		wait.For(t, 60*time.Second, func() bool { return packsAtKill-repo.packBytes(t) >= 900<<10 },
			"the snapshot's own chunks to leave the bucket (packs at the kill: %d bytes, now %d)", packsAtKill, repo.packBytes(t))
	}
	// The source's backup restores exactly, and the transfer goes again.
	if res, body := c.Source.request("POST", "/api/servers/"+id+"/backup/"+b1+"/restore", map[string]any{"adapter": "wings", "truncate_directory": true}, ""); res.StatusCode != 202 {
		t.Fatalf("restore on the source: %d %s", res.StatusCode, body)
	}
	if call, ok := c.Panel.WaitForCall("POST", "/backups/"+b1+"/restore", 60*time.Second); !ok || !strings.Contains(string(call.Body), `"successful":true`) {
		t.Fatalf("the restore on the source failed\n%s", c.Source.log)
	}
	if got := relTree(t, c.Source.dataDir(id)); !maps.Equal(got, atBackup) {
		t.Fatalf("the source after the restore:\n%s", cmp.Diff(atBackup, got))
	}
	want := snap(t, c.Source.dataDir(id))
	before := len(c.reports(c.Target, id))
	c.startTransfer(id)
	wait.For(t, 120*time.Second, func() bool { return len(c.reports(c.Target, id)) > before }, "the target's report")
	if r := c.reports(c.Target, id); r[len(r)-1] != "success" {
		t.Fatalf("the transfer after the restart: %v\nSOURCE:\n%s\nTARGET:\n%s", r, c.Source.log, c.Target.log)
	}
	c.Source.waitDaemonLog(`the target shares the backup repository: transfer by manifest`, 10*time.Second)
	if diff := cmp.Diff(want, snap(t, c.Target.dataDir(id))); diff != "" {
		t.Fatalf("tree differs (-source +target):\n%s", diff)
	}
}
