package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// s3Repo is a node whose backup repository is under prefix in the bucket
// of store.
type s3Repo struct {
	*node
	store  *objectstore.Store
	prefix string
}

// s3RepositoryNode starts a node (in-memory runtime: no container is
// needed) with system.backups.format: repository in store's bucket, under
// a prefix of its own; secret overrides the store's secret when not "".
func s3RepositoryNode(t *testing.T, store *objectstore.Store, secret string) *s3Repo {
	t.Helper()
	if secret == "" {
		secret = store.Secret
	}
	prefix := "e2e-" + newBackupID()[:8] + "/"
	n := startNode(t, nodeOptions{
		fake:    true,
		servers: []devpanel.Server{gameServer(backupServer)},
		mutate: func(c *config.Config) {
			c.System.Backups.Format = config.BackupFormatRepository
			c.System.Backups.Repository.S3 = config.BackupRepositoryS3{
				Endpoint: store.URL, Bucket: store.Bucket, Prefix: prefix, PathStyle: true,
				AccessKeyID: store.Access, SecretAccessKey: secret,
			}
		},
	})
	return &s3Repo{node: n, store: store, prefix: prefix}
}

// objects lists the bucket (every key, with its size), read with an S3
// client of its own.
func (r *s3Repo) objects(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	p := s3.NewListObjectsV2Paginator(r.store.Client, &s3.ListObjectsV2Input{Bucket: aws.String(r.store.Bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatalf("listing the bucket: %v", err)
		}
		for _, o := range page.Contents {
			out[aws.ToString(o.Key)] = aws.ToInt64(o.Size)
		}
	}
	return out
}

// usage is the bytes of the repository's objects in the bucket.
func (r *s3Repo) usage(t *testing.T) int64 {
	t.Helper()
	var total int64
	for _, n := range r.objects(t) {
		total += n
	}
	return total
}

func (r *s3Repo) get(t *testing.T, key string) []byte {
	t.Helper()
	b := r.getIfExists(t, key)
	if b == nil {
		t.Fatalf("get %s: no such object", key)
	}
	return b
}

// getIfExists is nil when the object is gone (the GC deletes packs while
// they are read).
func (r *s3Repo) getIfExists(t *testing.T, key string) []byte {
	t.Helper()
	res, err := r.store.Client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(r.store.Bucket), Key: aws.String(r.prefix + key)})
	if _, gone := errors.AsType[*types.NoSuchKey](err); gone {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// manifestChunks is the set of chunk hashes the backup's manifest (in
// the bucket) names.
func (r *s3Repo) manifestChunks(t *testing.T, id string) map[string]bool {
	t.Helper()
	man, err := chunkstore.ParseManifest(r.get(t, "snapshots/"+backupServer+"/"+id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, c := range man.Chunks {
		out[c.Hash] = true
	}
	return out
}

// packedBlobs is the set of blob hashes in the bucket's packs, read from
// their trailers (layout in damageLargestBlob).
func (r *s3Repo) packedBlobs(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for key := range r.objects(t) {
		rel, ok := strings.CutPrefix(key, r.prefix+"packs/")
		if !ok {
			continue
		}
		b := r.getIfExists(t, "packs/"+rel)
		if b == nil {
			continue
		}
		if len(b) < 44 || string(b[len(b)-8:]) != "WHPACK01" {
			t.Fatalf("pack %s has no trailer", key)
		}
		count := int(binary.BigEndian.Uint32(b[len(b)-44:]))
		entries := b[len(b)-44-count*44 : len(b)-44]
		for i := range count {
			out[fmt.Sprintf("%x", entries[i*44:i*44+32])] = true
		}
	}
	return out
}

// contentTree describes the tree under dir: every directory, link target
// and file content (SHA-256) and mode; filesOnly keeps only the regular
// files (what tar -xzf extracts of a backup: docs/compatibility.md).
func contentTree(t *testing.T, dir string, filesOnly bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = fmt.Sprintf("%v %x", fi.Mode(), sha256.Sum256(b))
		case filesOnly:
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "-> " + target
		default:
			out[rel] = fi.Mode().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameTree fails the test when got differs from want, naming the first
// differences.
func sameTree(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	var diffs []string
	for k, v := range want {
		if got[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: want %q, got %q", k, v, got[k]))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: extra %q", k, v))
		}
	}
	if len(diffs) > 0 {
		t.Fatalf("%s differs from the tree at backup time:\n%s", what, strings.Join(diffs, "\n"))
	}
}

// untar extracts archive (a tar.gz) with the system tar and returns the
// regular files it wrote.
func untar(t *testing.T, archive string) map[string]string {
	t.Helper()
	out := t.TempDir()
	if b, err := exec.Command("tar", "-xzf", archive, "-C", out).CombinedOutput(); err != nil {
		t.Fatalf("tar -xzf %s: %v %s", archive, err, b)
	}
	return contentTree(t, out, true)
}

// localFiles lists every regular file under dir.
func localFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestBackupRepositoryS3PanelFlows: with the repository in a bucket, the
// panel's backup, signed download, restore with truncate and delete work
// through the real binary; the objects are in the bucket under the prefix
// and nothing of the repository is on local disk; the second backup adds
// little; the delete's garbage collection removes from the bucket the
// blobs only the deleted backup used; the CLI's verify and export read the
// bucket.
func TestBackupRepositoryS3PanelFlows(t *testing.T) {
	t.Parallel()
	r := s3RepositoryNode(t, objectstore.StartOrSkip(t), "")
	dir := r.serverDir(backupServer)
	writeFiles(t, dir, map[string]string{
		"server.properties": "motd=one\n", "world/region.bin": randomBytes(2 << 20),
		"old.bin": randomBytes(3 << 20), "sub/b.txt": "b",
	})
	if err := os.Symlink("sub/b.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "empty"), 0o755)

	// 1. Backup 1 goes to the bucket, under the prefix, and nothing of the
	// repository is on local disk.
	id1 := newBackupID()
	if st := r.backup(id1, "local", ""); !st.Successful {
		t.Fatalf("backup 1: %+v\n%s", st, r.log)
	}
	tree1 := contentTree(t, dir, false)
	r.checkLayout(t, id1)
	u1 := r.usage(t)

	// 2. One small file changed (and the big old.bin gone, a new file):
	// the bucket grows by far less than the tree.
	os.Remove(filepath.Join(dir, "old.bin"))
	writeFiles(t, dir, map[string]string{"server.properties": "motd=two\n", "new.txt": "new"})
	id2 := newBackupID()
	if st := r.backup(id2, "local", ""); !st.Successful {
		t.Fatalf("backup 2: %+v\n%s", st, r.log)
	}
	tree2 := contentTree(t, dir, false)
	if grow := r.usage(t) - u1; grow > 256<<10 {
		t.Fatalf("backup 2 grew the bucket by %d bytes; the tree is %d", grow, u1)
	}

	// 3. The signed download of backup 2 is a tar.gz that tar extracts to
	// the tree's files.
	r.checkDownload(t, id2, tree2)

	// 4. Restore backup 1 with truncate: the tree at backup 1.
	r.restoreTruncate(t, id1)
	sameTree(t, "the restore of backup 1", tree1, contentTree(t, dir, false))
	if b, _ := os.ReadFile(filepath.Join(dir, "server.properties")); string(b) != "motd=one\n" {
		t.Fatalf("server.properties = %q after the restore of backup 1", b)
	}
	if _, err := os.Lstat(filepath.Join(dir, "new.txt")); !os.IsNotExist(err) {
		t.Fatal("the truncating restore kept new.txt")
	}

	// 6. The CLI reads the bucket: verify, and export of backup 1.
	r.checkCLI(t, id1, tree1)

	// 5. Delete backup 1: 404 afterwards, its blobs leave the bucket, and
	// backup 2 still restores and downloads.
	r.checkDelete(t, id1, id2)
	r.checkDownload(t, id2, tree2)
	r.restoreTruncate(t, id2)
	sameTree(t, "the restore of backup 2", tree2, contentTree(t, dir, false))
}

// checkLayout checks that the bucket holds the repository's objects, all
// under the prefix, with backup id's manifest, and that the backup and
// temporary directories on local disk hold no file.
func (r *s3Repo) checkLayout(t *testing.T, id string) {
	t.Helper()
	kinds := map[string]int{}
	for key := range r.objects(t) {
		rel, ok := strings.CutPrefix(key, r.prefix)
		if !ok {
			t.Fatalf("object %s outside the prefix %s", key, r.prefix)
		}
		kind, _, _ := strings.Cut(rel, "/")
		kinds[kind]++
	}
	if kinds["packs"] == 0 || kinds["index"] == 0 || kinds["snapshots"] == 0 {
		t.Fatalf("the bucket holds %v; want packs, index and snapshots", kinds)
	}
	if len(r.manifestChunks(t, id)) == 0 {
		t.Fatal("the manifest names no chunk")
	}
	if files := localFiles(t, r.Config.System.BackupDirectory); len(files) != 0 {
		t.Fatalf("files under system.backup_directory: %v", files)
	}
	// Nor is anything staged in the temporary directory.
	if files := localFiles(t, r.Config.System.TmpDirectory); len(files) != 0 {
		t.Fatalf("files under system.tmp_directory: %v", files)
	}
	if _, err := os.Stat(r.Config.BackupRepositoryPath()); !os.IsNotExist(err) {
		t.Fatalf("a local repository directory: %v", err)
	}
}

func (r *s3Repo) checkDownload(t *testing.T, id string, want map[string]string) {
	t.Helper()
	code, body := r.download(id)
	if code != 200 {
		t.Fatalf("download of %s: %d %s", id, code, body)
	}
	archive := filepath.Join(t.TempDir(), id+".tar.gz")
	if err := os.WriteFile(archive, body, 0o600); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "the download", onlyFiles(want), untar(t, archive))
}

// onlyFiles keeps the regular files of a contentTree.
func onlyFiles(tree map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range tree {
		if strings.HasPrefix(v, "-") && !strings.HasPrefix(v, "->") {
			out[k] = v
		}
	}
	return out
}

// restoreTruncate restores id with truncate and waits for its success.
func (r *s3Repo) restoreTruncate(t *testing.T, id string) {
	t.Helper()
	path := "/backups/" + id + "/restore"
	before := len(r.Panel.CallsTo("POST", path))
	if code := r.restoreBackup(id, true); code != 202 {
		t.Fatalf("restore of %s: %d", id, code)
	}
	if !waitCalls(t, r.node, path, before+1) {
		t.Fatalf("restore of %s failed\n%s", id, r.log)
	}
}

func (r *s3Repo) checkCLI(t *testing.T, id string, want map[string]string) {
	t.Helper()
	if o, err := exec.Command(wharfBinary, "backups", "verify", "--config", r.CfgPath).CombinedOutput(); err != nil || !strings.Contains(string(o), "ok       "+id) {
		t.Fatalf("verify: %v\n%s", err, o)
	}
	to := t.TempDir()
	if o, err := exec.Command(wharfBinary, "backups", "export", "--config", r.CfgPath, "--to", to, id).CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, o)
	}
	sameTree(t, "the export", onlyFiles(want), untar(t, filepath.Join(to, id+".tar.gz")))
}

// checkDelete deletes id1 through the panel's DELETE and waits for the
// daemon's garbage collection to remove from the bucket every blob id1
// used and id2 does not.
func (r *s3Repo) checkDelete(t *testing.T, id1, id2 string) {
	t.Helper()
	used1, used2 := r.manifestChunks(t, id1), r.manifestChunks(t, id2)
	only1 := 0
	for h := range used1 {
		if !used2[h] {
			only1++
		}
	}
	if only1 == 0 {
		t.Fatal("backup 1 has no blob of its own")
	}
	blobs := r.packedBlobs(t)
	for h := range used1 {
		if !blobs[h] {
			t.Fatalf("blob %s of backup 1 is in no pack", h)
		}
	}
	before := r.usage(t)
	if res, body := r.request("DELETE", "/api/servers/"+backupServer+"/backup/"+id1, nil, ""); res.StatusCode != 204 {
		t.Fatalf("delete: %d %s", res.StatusCode, body)
	}
	if code := r.restoreBackup(id1, false); code != 404 {
		t.Fatalf("restore of a deleted backup: %d", code)
	}
	if code, _ := r.download(id1); code != 404 {
		t.Fatalf("download of a deleted backup: %d", code)
	}
	wait.For(t, time.Minute, func() bool {
		blobs := r.packedBlobs(t)
		for h := range used1 {
			if !used2[h] && blobs[h] {
				return false
			}
		}
		return true
	}, "the GC to remove backup 1's %d own blobs from the bucket\n%s", only1, r.log)
	blobs = r.packedBlobs(t)
	for h := range used2 {
		if !blobs[h] {
			t.Fatalf("the GC removed blob %s of backup 2", h)
		}
	}
	if after := r.usage(t); after > before-(2<<20) {
		t.Fatalf("the bucket holds %d bytes after the delete, %d before", after, before)
	}
}

// TestBackupRepositoryS3WrongSecret: with a wrong secret key the backup is
// reported failed, the daemon keeps running, and neither its log nor what
// the panel is told contains the secret; restarted with the right secret,
// the node backs up.
func TestBackupRepositoryS3WrongSecret(t *testing.T) {
	t.Parallel()
	const secret = "wrong-secret-4e1d9c7a0b3f"
	r := s3RepositoryNode(t, objectstore.StartOrSkip(t), secret)
	writeFiles(t, r.serverDir(backupServer), map[string]string{"a.txt": "a"})
	id := newBackupID()
	st := r.backup(id, "local", "")
	if st.Successful || st.Checksum != "" {
		t.Fatalf("a backup with a wrong secret: %+v", st)
	}
	res, err := http.Get(r.URL + "/api/system")
	if err != nil || r.bootFailed() {
		t.Fatalf("the daemon stopped after the failed backup: %v\n%s", err, r.log)
	}
	res.Body.Close()
	if strings.Contains(r.log.String(), secret) {
		t.Fatalf("the secret is in the daemon's log:\n%s", r.log)
	}
	if !strings.Contains(r.log.String(), "system.backups.repository.s3") {
		t.Fatalf("the log does not name system.backups.repository.s3:\n%s", r.log)
	}
	for _, c := range r.Panel.Calls() {
		if bytes.Contains(c.Body, []byte(secret)) || strings.Contains(c.Query, secret) {
			t.Fatalf("the panel was told the secret: %s %s %s", c.Method, c.Path, c.Body)
		}
	}
	if len(r.objects(t)) != 0 {
		t.Fatalf("objects written with a wrong secret: %v", r.objects(t))
	}

	// Restarted with the right secret, the node backs up into the bucket:
	// the failure left nothing behind that it trusts.
	r.stop()
	r.Config.System.Backups.Repository.S3.SecretAccessKey = r.store.Secret
	if err := r.Config.Save(r.CfgPath); err != nil {
		t.Fatal(err)
	}
	r.restart()
	if st := r.backup(newBackupID(), "local", ""); !st.Successful {
		t.Fatalf("backup with the right secret: %+v\n%s", st, r.log)
	}
	if len(r.objects(t)) == 0 {
		t.Fatal("nothing in the bucket after a successful backup")
	}
}
