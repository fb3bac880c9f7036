package e2e

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// repoBackups makes n repository backups of id on the source, each after
// a change of 1 MiB, and returns them with the tree each saved.
func repoBackups(t *testing.T, c *cluster, id string, n int) ([]string, map[string]map[string]string) {
	t.Helper()
	var ids []string
	trees := map[string]map[string]string{}
	for i := range n {
		writeFiles(t, c.Source.dataDir(id), map[string]string{
			fmt.Sprintf("gen/%d.bin", i): randomBytes(1 << 20), "world/level.dat": fmt.Sprintf("generation %d", i),
		})
		b := newBackupID()
		c.backupOnSource(t, id, b)
		ids = append(ids, b)
		trees[b] = relTree(t, c.Source.dataDir(id))
	}
	return ids, trees
}

// TestTransferBackupsTravelAsReferences (issue 36): source and target
// share the repository; three repository backups of 9–11 MiB go with a
// transfer by manifest through a counting proxy in front of the target.
// They go as references: the bytes through the proxy stay those of the
// form (a few KiB; the existing transfer by manifest without backups sent
// 624 bytes), the target stores its own copy of each manifest
// (`<backup>@<node>`), and the source deletes its copies and collects. The
// control: that collection removed chunks (the transfer snapshot's own),
// after the source's copies were gone. Every travelled backup then
// restores exactly on the target.
func TestTransferBackupsTravelAsReferences(t *testing.T) {
	const id = "7a00003a-0000-4000-8000-00000000003a"
	store := objectstore.StartOrSkip(t)
	prefix, c := sharedCluster(t, id, store, true)
	repo := &s3Repo{store: store, prefix: prefix}
	fill(t, c.Source, id, 8<<20)
	backups, trees := repoBackups(t, c, id, 3)
	var backupBytes int64
	for _, b := range backups {
		m, err := chunkstore.ParseManifest(repo.get(t, "snapshots/"+id+"/"+b+".json"))
		if err != nil {
			t.Fatal(err)
		}
		backupBytes += m.Size
	}
	// Changed after the last backup: the transfer snapshot's own chunks.
	writeFiles(t, c.Source.dataDir(id), map[string]string{"changed/after-backups.bin": randomBytes(1 << 20)})
	want := snap(t, c.Source.dataDir(id))

	proxy, sent := countingProxy(t, c.Target.URL)
	res, body := c.Source.request("POST", "/api/servers/"+id+"/transfer", map[string]any{
		"url": proxy + "/api/transfers", "token": "Bearer " + c.transferJWT(id), "backups": backups,
	}, "")
	if res.StatusCode != 202 {
		t.Fatalf("start transfer: %d %s", res.StatusCode, body)
	}
	c.waitReports(c.Target, id, []string{"success"}, 120*time.Second)
	c.Source.waitDaemonLog(`server=`+id+` direction=outgoing status=completed`, 30*time.Second)
	c.Source.waitDaemonLog(`the target shares the backup repository: transfer by manifest`, 10*time.Second)
	for _, b := range backups {
		c.Source.waitDaemonLog(`sent as a reference to its manifest" server=`+id+` direction=outgoing backup=`+b, 10*time.Second)
		c.Target.waitDaemonLog(`adopted a backup from the shared repository" server=`+id+` backup=`+b, 10*time.Second)
	}
	if strings.Contains(c.Source.log.String(), "Streaming backup") {
		t.Fatal("the source streamed a backup archive")
	}
	n := sent.Load()
	t.Logf("bytes to the target: %d, with %d backups of %d bytes in all", n, len(backups), backupBytes)
	if limit := int64(2<<10 + 512*len(backups)); n > limit {
		t.Fatalf("%d bytes went to the target, more than the form's %d", n, limit)
	}
	if diff := cmp.Diff(want, snap(t, c.Target.dataDir(id))); diff != "" {
		t.Fatalf("tree differs (-source +target):\n%s", diff)
	}

	// The bucket: the target's copies, the source's gone.
	wait.For(t, 30*time.Second, func() bool {
		objs := repo.objects(t)
		for _, b := range backups {
			if _, ok := objs[prefix+"snapshots/"+id+"/"+b+".json"]; ok {
				return false
			}
			adopted := false
			for k := range objs {
				if strings.HasPrefix(k, prefix+"snapshots/"+id+"/"+b+"@") && strings.HasSuffix(k, ".json") {
					adopted = true
				}
			}
			if !adopted {
				t.Fatalf("no copy of backup %s adopted by the target in the bucket: %v", b, slices.Sorted(maps.Keys(objs)))
			}
		}
		return true
	}, "the source's copies to leave the bucket")
	// The control: the source's collection ran after its copies went, and
	// removed chunks.
	gc := regexp.MustCompile(`backup repository garbage collection" chunks_removed=[1-9]`)
	wait.For(t, 90*time.Second, func() bool {
		log := c.Source.log.String()
		last := strings.LastIndex(log, "deleted this node's copy of a backup the target adopted")
		return last >= 0 && gc.MatchString(log[last:])
	}, "the source's collection to run after its copies went\n%s", c.Source.log)

	for i, b := range backups {
		path := "/backups/" + b + "/restore"
		before := len(c.Panel.CallsTo("POST", path))
		res, body := c.Target.request("POST", "/api/servers/"+id+"/backup/"+b+"/restore", map[string]any{"adapter": "wings", "truncate_directory": true}, "")
		if res.StatusCode != 202 {
			t.Fatalf("restore of backup %d on the target: %d %s", i, res.StatusCode, body)
		}
		wait.For(t, 60*time.Second, func() bool { return len(c.Panel.CallsTo("POST", path)) > before }, "the restore of backup %d to end", i)
		if call := c.Panel.CallsTo("POST", path)[before]; !strings.Contains(string(call.Body), `"successful":true`) {
			t.Fatalf("the restore of backup %d on the target failed: %s\n%s", i, call.Body, c.Target.log)
		}
		if got := relTree(t, c.Target.dataDir(id)); !maps.Equal(got, trees[b]) {
			t.Fatalf("backup %d restored on the target:\n%s", i, cmp.Diff(trees[b], got))
		}
	}
}
