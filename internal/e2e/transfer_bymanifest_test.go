package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// countingProxy forwards to target and counts the bytes of the request
// bodies it forwards (what the source sends the target).
func countingProxy(t testing.TB, target string) (string, *atomic.Int64) {
	t.Helper()
	up, _ := url.Parse(target)
	var n atomic.Int64
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(up) }}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = countBody{r.Body, &n}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

type countBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countBody) Read(p []byte) (int, error) {
	k, err := c.ReadCloser.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// sharedCluster is a cluster whose nodes keep backups in store's bucket,
// shared (issue 36): under one prefix, or each under its own.
func sharedCluster(t *testing.T, id string, store *objectstore.Store, samePrefix bool) (string, *cluster) {
	t.Helper()
	base := "xfer36-" + newBackupID()[:8]
	return base + "/", startCluster(t, []devpanel.Server{transferServer(t, id)}, func(name string, c *config.Config) {
		prefix := base + "/"
		if !samePrefix {
			prefix = base + "-" + name + "/"
		}
		c.System.Backups.Format = config.BackupFormatRepository
		c.System.Backups.Repository.Shared = true
		c.System.Backups.Repository.S3 = config.BackupRepositoryS3{
			Endpoint: store.URL, Bucket: store.Bucket, Prefix: prefix, PathStyle: true,
			AccessKeyID: store.Access, SecretAccessKey: store.Secret,
		}
	})
}

// transferThrough starts the transfer of id to the target through proxy
// and waits for the target's success report.
func (c *cluster) transferThrough(t *testing.T, id, proxy string) {
	t.Helper()
	res, body := c.Source.request("POST", "/api/servers/"+id+"/transfer",
		map[string]any{"url": proxy + "/api/transfers", "token": "Bearer " + c.transferJWT(id)}, "")
	if res.StatusCode != 202 {
		t.Fatalf("start transfer: %d %s", res.StatusCode, body)
	}
	c.waitReports(c.Target, id, []string{"success"}, 120*time.Second)
	c.Source.waitDaemonLog(`server=`+id+` direction=outgoing status=completed`, 30*time.Second)
}

// serverFill is the server of the transfer tests by manifest: 16 MiB,
// backed up, then 2 % of it added (incompressible).
func serverFill(t *testing.T, c *cluster, id string) (want map[string]string, size int64) {
	t.Helper()
	const total = 16 << 20
	fill(t, c.Source, id, total)
	c.backupOnSource(t, id, newBackupID())
	writeFiles(t, c.Source.dataDir(id), map[string]string{"changed/after-backup.bin": randomBytes(total / 50)})
	return snap(t, c.Source.dataDir(id)), total
}

// TestTransferByManifestSharedRepository (issue 36): source and target
// share the backup repository; after a backup and a 2 % change, the
// transfer sends the snapshot's name, not the files: the bytes through a
// counting proxy in front of the target are at most 10 % of the server
// (a few KiB), and the files arrive exact. The transfer snapshot leaves
// the bucket afterwards.
func TestTransferByManifestSharedRepository(t *testing.T) {
	const id = "7a000036-0000-4000-8000-000000000036"
	store := objectstore.StartOrSkip(t)
	_, c := sharedCluster(t, id, store, true)
	want, size := serverFill(t, c, id)
	proxy, sent := countingProxy(t, c.Target.URL)
	c.transferThrough(t, id, proxy)
	c.Source.waitDaemonLog(`the target shares the backup repository: transfer by manifest`, 10*time.Second)
	if diff := cmp.Diff(want, snap(t, c.Target.dataDir(id))); diff != "" {
		t.Fatalf("tree differs (-source +target):\n%s", diff)
	}
	if n := sent.Load(); n > size/10 {
		t.Fatalf("%d bytes went to the target, more than 10 %% of the %d-byte server", n, size)
	}
	t.Logf("bytes to the target: %d for a %d-byte server", sent.Load(), size)
	wait.For(t, 30*time.Second, func() bool {
		for k := range (&s3Repo{store: store}).objects(t) {
			if strings.Contains(k, "/snapshots/"+id+"/transfer-") {
				return false
			}
		}
		return true
	}, "the transfer snapshot to leave the bucket")
	c.Target.assertUsable(id)
}

// TestTransferByManifestFallsBack: each node shares a repository, but not
// the same one: today's transfer runs (the whole server through the
// proxy), and the files arrive exact.
func TestTransferByManifestFallsBack(t *testing.T) {
	const id = "7a000037-0000-4000-8000-000000000037"
	store := objectstore.StartOrSkip(t)
	_, c := sharedCluster(t, id, store, false)
	want, size := serverFill(t, c, id)
	proxy, sent := countingProxy(t, c.Target.URL)
	c.transferThrough(t, id, proxy)
	if strings.Contains(c.Source.log.String(), "transfer by manifest") {
		t.Fatal("the source transferred by manifest to a target with another repository")
	}
	if diff := cmp.Diff(want, snap(t, c.Target.dataDir(id))); diff != "" {
		t.Fatalf("tree differs (-source +target):\n%s", diff)
	}
	if n := sent.Load(); n < size/2 {
		t.Fatalf("only %d bytes went to the target for a %d-byte server: not today's transfer", n, size)
	}
}

// TestTransferByManifestRefusesHostileReferences: a source (or anyone
// holding a transfer token) names a snapshot the target's repository does
// not hold, another repository, a name that is a path, or a real snapshot
// with a wrong checksum: the target refuses with 400 and keeps nothing of
// the server. Then the same for backups sent by reference (another
// server's manifest, a path, a huge name, a manifest that does not exist,
// ...): 400, nothing kept, no manifest adopted. The control: the same form
// naming a real snapshot with its checksum, and a real backup, is
// accepted, the files arrive and the backup is adopted.
func TestTransferByManifestRefusesHostileReferences(t *testing.T) {
	const id = "7a000038-0000-4000-8000-000000000038"
	store := objectstore.StartOrSkip(t)
	prefix, c := sharedCluster(t, id, store, true)
	writeFiles(t, c.Source.dataDir(id), map[string]string{"a.txt": "from the snapshot", "world/r.bin": randomBytes(1 << 20)})
	want := snap(t, c.Source.dataDir(id))
	backupID := newBackupID()
	c.backupOnSource(t, id, backupID)
	repo := &s3Repo{store: store, prefix: prefix}
	var repoID string
	for k := range repo.objects(t) {
		if rest, ok := strings.CutPrefix(k, prefix+"ids/"); ok {
			repoID = rest
		}
	}
	if repoID == "" {
		t.Fatal("the shared repository has no id")
	}
	manifest := repo.get(t, "snapshots/"+id+"/"+backupID+".json")
	m, err := chunkstore.ParseManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	snapshot := "transfer-" + uuid.NewString()
	if _, err := store.Client.PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(store.Bucket), Key: aws.String(prefix + "snapshots/" + id + "/" + snapshot + ".json"), Body: bytes.NewReader(manifest),
	}); err != nil {
		t.Fatal(err)
	}
	ref := func(repo, name string) string { return `{"repository":"` + repo + `","snapshot":"` + name + `"}` }
	for _, tt := range []struct{ what, ref, sum, msg string }{
		{"a snapshot the repository lacks", ref(repoID, "transfer-"+uuid.NewString()), m.SHA1, "invalid transfer archive"},
		{"another repository", ref(strings.Repeat("0", 32), snapshot), m.SHA1, "not the shared repository"},
		{"a name that is a path", ref(repoID, "../"+backupID), m.SHA1, "not a snapshot reference"},
		{"a backup's name", ref(repoID, backupID), m.SHA1, "not a snapshot reference"},
		{"a wrong checksum", ref(repoID, snapshot), strings.Repeat("0", 40), "checksums don't match"},
	} {
		status, msg := c.postForm(id, [][2]string{{"repository_snapshot", tt.ref}, {"checksum", tt.sum}})
		if status != 400 || !strings.Contains(msg, tt.msg) {
			t.Fatalf("%s: %d %q, want 400 naming %q", tt.what, status, msg, tt.msg)
		}
		c.Target.assertGone(id)
	}
	// Backups by reference (backuprefs.go): another server's manifest, a
	// path, a huge name, a manifest that does not exist, another backup's
	// manifest, a wrong checksum, another repository: each refused with
	// 400, the server not kept, no copy adopted.
	other, otherBackup := "7a0000ff-0000-4000-8000-0000000000ff", newBackupID()
	if _, err := store.Client.PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(store.Bucket), Key: aws.String(prefix + "snapshots/" + other + "/" + otherBackup + ".json"), Body: bytes.NewReader(manifest),
	}); err != nil {
		t.Fatal(err)
	}
	bref := func(repo, name, sum string) string {
		return `{"repository":"` + repo + `","manifest":"` + name + `","checksum":"` + sum + `"}`
	}
	adopted := func() []string {
		var out []string
		for k := range repo.objects(t) {
			if strings.Contains(k, "@") {
				out = append(out, k)
			}
		}
		return out
	}
	good := [][2]string{{"repository_snapshot", ref(repoID, snapshot)}, {"checksum", m.SHA1}}
	for _, tt := range []struct{ what, part, ref, msg string }{
		{"another server's manifest", otherBackup, bref(repoID, otherBackup, m.SHA1), "names no backup of this server"},
		{"a path", otherBackup, bref(repoID, "../"+other+"/"+otherBackup, m.SHA1), "not a backup reference"},
		{"a path after the id", backupID, bref(repoID, backupID+"@../../"+other+"/"+otherBackup, m.SHA1), "not a backup reference"},
		{"a huge name", backupID, bref(repoID, backupID+"@"+strings.Repeat("n", 1<<20), m.SHA1), "not a backup reference"},
		{"a manifest that does not exist", backupID, bref(repoID, backupID+"@no-such-node", m.SHA1), "names no backup of this server"},
		{"another backup's manifest", newBackupID(), bref(repoID, backupID, m.SHA1), "not a backup reference"},
		{"a wrong checksum", backupID, bref(repoID, backupID, strings.Repeat("0", 40)), "names no backup of this server"},
		{"another repository", backupID, bref(strings.Repeat("0", 32), backupID, m.SHA1), "not the shared repository"},
	} {
		status, msg := c.postForm(id, append(slices.Clone(good), [2]string{"repository_backup_" + tt.part, tt.ref}))
		if status != 400 || !strings.Contains(msg, tt.msg) {
			t.Fatalf("backup reference, %s: %d %q, want 400 naming %q", tt.what, status, msg, tt.msg)
		}
		c.Target.assertGone(id)
		if a := adopted(); len(a) > 0 {
			t.Fatalf("backup reference, %s: adopted %v", tt.what, a)
		}
	}
	// The control: the same form with a real reference is accepted, and
	// the backup adopted.
	status, msg := c.postForm(id, append(slices.Clone(good), [2]string{"repository_backup_" + backupID, bref(repoID, backupID, m.SHA1)}))
	if status != 200 {
		t.Fatalf("the control, a real snapshot and backup reference: %d %q", status, msg)
	}
	if diff := cmp.Diff(want, snap(t, c.Target.dataDir(id))); diff != "" {
		t.Fatalf("tree differs (-source +target):\n%s", diff)
	}
	if a := adopted(); len(a) != 1 || !strings.Contains(a[0], "/snapshots/"+id+"/"+backupID+"@") {
		t.Fatalf("the control's backup adopted as %v", a)
	}
}

// failingS3 is a proxy in front of the S3 server that answers 503 to the
// requests fail matches (the Host header is kept: it is signed).
func failingS3(t *testing.T, target string, fail func(*http.Request) bool) string {
	t.Helper()
	up, _ := url.Parse(target)
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(up)
		pr.Out.Host = pr.In.Host
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail(r) {
			http.Error(w, "<Error><Code>ServiceUnavailable</Code></Error>", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestTransferByManifestBucketFails: the bucket stops answering the
// target's reads of packs while it extracts the snapshot, then the
// source's writes while it stores it: each transfer fails cleanly (the
// failure reported, the server still on the source, nothing kept on the
// target, the transfer snapshot gone from the bucket); once the bucket
// answers again the transfer goes by manifest and the files are exact.
func TestTransferByManifestBucketFails(t *testing.T) {
	const id = "7a000039-0000-4000-8000-000000000039"
	store := objectstore.StartOrSkip(t)
	var srcPuts, tgtPacks atomic.Bool
	srcURL := failingS3(t, store.URL, func(r *http.Request) bool { return srcPuts.Load() && r.Method == http.MethodPut })
	tgtURL := failingS3(t, store.URL, func(r *http.Request) bool {
		return tgtPacks.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/packs/")
	})
	prefix := "xfer36f-" + newBackupID()[:8] + "/"
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, func(name string, c *config.Config) {
		endpoint := srcURL
		if name == "target" {
			endpoint = tgtURL
		}
		c.System.Backups.Format = config.BackupFormatRepository
		c.System.Backups.Repository.Shared = true
		c.System.Backups.Repository.S3 = config.BackupRepositoryS3{
			Endpoint: endpoint, Bucket: store.Bucket, Prefix: prefix, PathStyle: true,
			AccessKeyID: store.Access, SecretAccessKey: store.Secret, MaxAttempts: 1,
		}
	})
	want, _ := serverFill(t, c, id)
	repo := &s3Repo{store: store, prefix: prefix}
	noSnapshot := func() {
		t.Helper()
		wait.For(t, 30*time.Second, func() bool {
			for k := range repo.objects(t) {
				if strings.Contains(k, "/snapshots/"+id+"/transfer-") {
					return false
				}
			}
			return true
		}, "the transfer snapshot to leave the bucket")
	}
	ended := func(k int) {
		t.Helper()
		wait.For(t, 60*time.Second, func() bool {
			n := 0
			for _, st := range c.Source.statuses(id) {
				if st == "failed" {
					n++
				}
			}
			return n == k
		}, "the source's transfer %d to end failed\n%s", k, c.Source.log)
	}
	start := func() {
		t.Helper()
		res, body := c.Source.request("POST", "/api/servers/"+id+"/transfer",
			map[string]any{"url": c.Target.URL + "/api/transfers", "token": "Bearer " + c.transferJWT(id)}, "")
		if res.StatusCode != 202 {
			t.Fatalf("start transfer: %d %s", res.StatusCode, body)
		}
	}

	tgtPacks.Store(true)
	start()
	c.waitReports(c.Source, id, []string{"failure"}, 60*time.Second)
	ended(1)
	c.Source.waitDaemonLog(`transfer by manifest`, 10*time.Second)
	c.Target.assertGone(id)
	if res, body := c.Source.request("GET", "/api/servers/"+id, nil, ""); res.StatusCode != 200 {
		t.Fatalf("the server on the source after the failure: %d %s", res.StatusCode, body)
	}
	noSnapshot()
	tgtPacks.Store(false)

	srcPuts.Store(true)
	start()
	c.waitReports(c.Source, id, []string{"failure", "failure"}, 60*time.Second)
	ended(2)
	c.Target.assertGone(id)
	srcPuts.Store(false)

	start()
	c.waitReports(c.Target, id, []string{"failure", "success"}, 120*time.Second)
	if diff := cmp.Diff(want, snap(t, c.Target.dataDir(id))); diff != "" {
		t.Fatalf("tree differs (-source +target):\n%s", diff)
	}
	noSnapshot()
}
