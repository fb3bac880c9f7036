package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// sharedRepoNode is a node (in-memory runtime) whose repository is under
// prefix in store's bucket, shared with the other nodes there
// (system.backups.repository.shared, issue 36); its GC repacks every pack
// with an unused byte (max_unused_percent 0), the most a collection moves.
func sharedRepoNode(t *testing.T, store *objectstore.Store, prefix string) *s3Repo {
	t.Helper()
	n := startNode(t, nodeOptions{
		fake:    true,
		servers: []devpanel.Server{gameServer(backupServer)},
		mutate: func(c *config.Config) {
			c.UUID = uuid.NewString()
			c.System.Backups.Format = config.BackupFormatRepository
			c.System.Backups.Repository.Shared = true
			c.System.Backups.Repository.MaxUnusedPercent = 0
			c.System.Backups.Repository.S3 = config.BackupRepositoryS3{
				Endpoint: store.URL, Bucket: store.Bucket, Prefix: prefix, PathStyle: true,
				AccessKeyID: store.Access, SecretAccessKey: store.Secret,
			}
		},
	})
	return &s3Repo{node: n, store: store, prefix: prefix}
}

// TestRepositorySharedNodeDeletesAllItsBackups (issue 36): two real
// daemons share one bucket and prefix. Node B's backup shares chunks with
// node A's (the same server's big file), and B has read it (its index
// names A's packs). A deletes every backup of its own; its GC repacks the
// packs B's chunks were in and deletes them (the control: a pack B's
// backup used is gone, so B's index of before was really made stale).
// B's backup still downloads and restores exactly, B backs up again, and
// A's diagnostics say the repository is shared.
func TestRepositorySharedNodeDeletesAllItsBackups(t *testing.T) {
	t.Parallel()
	store := objectstore.StartOrSkip(t)
	prefix := "shared36-" + newBackupID()[:8] + "/"
	a := sharedRepoNode(t, store, prefix)
	big := randomBytes(6 << 20)
	writeFiles(t, a.serverDir(backupServer), map[string]string{"a.txt": "node a", "world/r.bin": big, "world/only-a.bin": randomBytes(4 << 20)})
	a1, a2 := newBackupID(), newBackupID()
	for _, id := range []string{a1, a2} {
		if st := a.backup(id, "local", ""); !st.Successful {
			t.Fatalf("node A's backup failed\n%s", a.log)
		}
	}
	b := sharedRepoNode(t, store, prefix)
	writeFiles(t, b.serverDir(backupServer), map[string]string{"b.txt": "node b", "world/r.bin": big})
	wantB := contentTree(t, b.serverDir(backupServer), false)
	b1 := newBackupID()
	if st := b.backup(b1, "local", ""); !st.Successful {
		t.Fatalf("node B's backup into the shared repository failed\n%s", b.log)
	}
	b.checkDownload(t, b1, wantB) // B's index now names A's packs
	usedA, usedB := a.manifestChunks(t, a1), b.manifestChunks(t, b1)
	for h := range a.manifestChunks(t, a2) {
		usedA[h] = true
	}
	shared := 0
	for h := range usedB {
		if usedA[h] {
			shared++
		}
	}
	if shared < 20 {
		t.Fatalf("node B's backup shares %d chunks with node A's", shared)
	}
	packsBefore := map[string]bool{}
	for k := range a.objects(t) {
		if strings.HasPrefix(k, prefix+"packs/") {
			packsBefore[k] = true
		}
	}
	for _, id := range []string{a1, a2} {
		if res, body := a.request("DELETE", "/api/servers/"+backupServer+"/backup/"+id, nil, ""); res.StatusCode != 204 {
			t.Fatalf("delete: %d %s", res.StatusCode, body)
		}
	}
	wait.For(t, time.Minute, func() bool {
		blobs := a.packedBlobs(t)
		for h := range usedA {
			if !usedB[h] && blobs[h] {
				return false
			}
		}
		return true
	}, "node A's GC to remove the blobs only its backups held\n%s", a.log)
	objs := a.objects(t)
	gone := 0
	for k := range packsBefore {
		if _, ok := objs[k]; !ok {
			gone++
		}
	}
	if gone == 0 {
		t.Fatal("the control: node A's GC deleted no pack, so node B's index was never stale")
	}
	blobs := a.packedBlobs(t)
	for h := range usedB {
		if !blobs[h] {
			t.Fatalf("node A's GC removed blob %s of node B's backup", h)
		}
	}
	b.checkDownload(t, b1, wantB)
	b.restoreTruncate(t, b1)
	sameTree(t, "node B's restore", wantB, contentTree(t, b.serverDir(backupServer), false))
	b2 := newBackupID()
	if st := b.backup(b2, "local", ""); !st.Successful {
		t.Fatalf("node B's backup after node A's GC failed\n%s", b.log)
	}
	b.checkDownload(t, b2, wantB)
	out, _ := exec.Command(wharfBinary, "diagnostics", "--config", a.CfgPath, "--log-lines", "0").CombinedOutput()
	if !strings.Contains(string(out), "repository nodes: shared with nodes/") {
		t.Fatalf("diagnostics of node A:\n%s", out)
	}
}

// TestRepositorySharedRefusesAnExclusiveNode: a node that does not share
// the repository (shared false, today's default) still refuses one that
// sharing nodes use, and a sharing node refuses one an exclusive node
// claimed.
func TestRepositorySharedRefusesAnExclusiveNode(t *testing.T) {
	t.Parallel()
	store := objectstore.StartOrSkip(t)
	prefix := "shared36x-" + newBackupID()[:8] + "/"
	a := sharedRepoNode(t, store, prefix)
	writeFiles(t, a.serverDir(backupServer), map[string]string{"a.txt": "node a"})
	if st := a.backup(newBackupID(), "local", ""); !st.Successful {
		t.Fatalf("node A's backup failed\n%s", a.log)
	}
	x := sharedS3Node(t, store, prefix, uuid.NewString())
	writeFiles(t, x.serverDir(backupServer), map[string]string{"x.txt": "node x"})
	if st := x.backup(newBackupID(), "local", ""); st.Successful {
		t.Fatalf("an exclusive node backed up into a shared repository\n%s", x.log)
	}
	prefix2 := "shared36y-" + newBackupID()[:8] + "/"
	y := sharedS3Node(t, store, prefix2, uuid.NewString())
	writeFiles(t, y.serverDir(backupServer), map[string]string{"y.txt": "node y"})
	if st := y.backup(newBackupID(), "local", ""); !st.Successful {
		t.Fatalf("node Y's backup failed\n%s", y.log)
	}
	s := sharedRepoNode(t, store, prefix2)
	writeFiles(t, s.serverDir(backupServer), map[string]string{"s.txt": "node s"})
	if st := s.backup(newBackupID(), "local", ""); st.Successful {
		t.Fatalf("a sharing node backed up into an exclusive node's repository\n%s", s.log)
	}
	if !wait.Until(10*time.Second, func() bool { return strings.Contains(s.log.String(), "without sharing it") }) {
		t.Fatalf("the sharing node's error does not say why:\n%s", s.log)
	}
}
