package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// Issue 33, items 5 and 6: a game that makes one 8 TiB sparse file (1 MiB
// of data) and one 4 MiB file with 127 more names, under a 32 MiB disk
// limit.
const (
	sparseApparent = 8 << 40
	linkedNames    = 128
)

// sparseLinksNode starts a node (in-memory runtime) with one server of a
// fresh UUID limited to 32 MiB, whose directory holds what the game wrote:
// big.img (8 TiB, 1 MiB of random data at 4 TiB) and links/n0…n127 (one
// 4 MiB random file). It returns the node, the server and the data.
func sparseLinksNode(t testing.TB, mutate ...func(*config.Config)) (*node, string, []byte, []byte) {
	t.Helper()
	id := uuid.NewString()
	s := gameServer(id)
	s.Settings["build"] = map[string]any{"memory_limit": 128, "swap": 0, "cpu_limit": 100, "disk_space": 32}
	opts := nodeOptions{fake: true, servers: []devpanel.Server{s}}
	if len(mutate) > 0 {
		opts.mutate = mutate[0]
	}
	n := startNode(t, opts)
	data, content := writeSparseAndLinks(t, n.serverDir(id))
	return n, id, data, content
}

// writeSparseAndLinks writes, as the game would, big.img and links/n0…n127
// into dir and checks the controls; it returns the data at 4 TiB and the
// linked file's content.
func writeSparseAndLinks(t testing.TB, dir string) ([]byte, []byte) {
	t.Helper()
	data := make([]byte, 1<<20)
	rand.Read(data)
	f, err := os.Create(filepath.Join(dir, "big.img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(sparseApparent); err != nil {
		f.Close()
		t.Skipf("the filesystem cannot make an 8 TiB sparse file: %v", err)
	}
	if _, err := f.WriteAt(data, sparseApparent/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	content := make([]byte, 4<<20)
	rand.Read(content)
	if err := os.MkdirAll(filepath.Join(dir, "links"), 0o755); err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(dir, "links", "n0")
	if err := os.WriteFile(first, content, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < linkedNames; i++ {
		if err := os.Link(first, filepath.Join(dir, "links", fmt.Sprintf("n%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// Controls: the file really is 8 TiB and holds ~1 MiB; the names
	// really share one inode.
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "big.img"), &st); err != nil || st.Size != sparseApparent || st.Blocks*512 > 2<<20 {
		t.Fatalf("control: big.img size %d, %d bytes allocated (%v)", st.Size, st.Blocks*512, err)
	}
	if err := syscall.Stat(first, &st); err != nil || st.Nlink != linkedNames {
		t.Fatalf("control: %d names share the file (%v)", st.Nlink, err)
	}
	return data, content
}

// checkSparseAndLinks checks a restored tree: big.img is 8 TiB with the
// data at 4 TiB and no more than ~1 MiB allocated; the 128 names hold the
// content and, where the filesystem allows it, share one inode.
func checkSparseAndLinks(t *testing.T, dir string, data, content []byte) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "big.img"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != sparseApparent || st.Blocks*512 > 2<<20 {
		t.Fatalf("restored big.img: size %d, %d bytes allocated", st.Size, st.Blocks*512)
	}
	f, err := os.Open(filepath.Join(dir, "big.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(data)+8192)
	if _, err := f.ReadAt(got, sparseApparent/2-4096); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[4096:4096+len(data)], data) || !bytes.Equal(got[:4096], make([]byte, 4096)) || !bytes.Equal(got[4096+len(data):], make([]byte, 4096)) {
		t.Fatal("restored big.img: the data at 4 TiB (or the holes around it) differ")
	}
	var ino uint64
	for i := range linkedNames {
		p := filepath.Join(dir, "links", fmt.Sprintf("n%d", i))
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, content) {
			t.Fatalf("restored %s: %d bytes, %v", p, len(b), err)
		}
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			ino = st.Ino
		} else if st.Ino != ino {
			t.Fatalf("restored links/n%d is not a hard link of links/n0", i)
		}
	}
}

// TestBackupSparseAndHardLinksAttack: the backup of such a tree completes
// in seconds as an archive of ~5 MiB (before: 8 TiB of zeros to read, an
// estimated 5 hours, and 512 MiB for the names), lists the file as a
// sparse entry and the 127 names as link entries, and restores (emptying
// the directory first) under the 32 MiB limit to the same tree: a sparse
// file with the data at its place, 128 names of one inode. The compress of
// the same files gives an archive of the same size.
func TestBackupSparseAndHardLinksAttack(t *testing.T) {
	t.Parallel()
	n, srv, data, content := sparseLinksNode(t)
	dir := n.serverDir(srv)
	id := newBackupID()
	start := time.Now()
	res, body := n.request("POST", "/api/servers/"+srv+"/backup", map[string]any{"adapter": "local", "uuid": id}, "")
	if res.StatusCode != 202 {
		t.Fatalf("backup: %d %s", res.StatusCode, body)
	}
	st := n.waitBackupStatus(id, 90*time.Second)
	t.Logf("backup reported after %s: %d bytes", time.Since(start).Round(time.Millisecond), st.Size)
	if !st.Successful {
		t.Fatalf("backup failed\n%s", n.log)
	}
	if st.Size > 8<<20 {
		t.Fatalf("the archive is %d bytes for 5 MiB of data", st.Size)
	}
	path := filepath.Join(n.Config.System.BackupDirectory, srv, id+".tar.gz")
	if _, err := os.Stat(path); err != nil {
		path = filepath.Join(n.Config.System.BackupDirectory, id+".tar.gz")
	}
	hdrs := archiveNames(t, path)
	if h := hdrs["big.img"]; h == nil || h.Size != sparseApparent || h.PAXRecords["GNU.sparse.major"] != "1" {
		t.Fatalf("big.img in the archive: %+v", h)
	}
	links := 0
	for i := range linkedNames {
		h := hdrs[fmt.Sprintf("links/n%d", i)]
		if h == nil {
			t.Fatalf("links/n%d missing from the archive", i)
		}
		if h.Typeflag == tar.TypeLink {
			links++
		}
	}
	if links != linkedNames-1 {
		t.Fatalf("%d link entries, want %d", links, linkedNames-1)
	}

	res, body = n.request("POST", "/api/servers/"+srv+"/backup/"+id+"/restore", map[string]any{"adapter": "local", "truncate_directory": true}, "")
	if res.StatusCode != 202 {
		t.Fatalf("restore: %d %s", res.StatusCode, body)
	}
	if !n.waitRestoreStatus(id, 90*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
	checkSparseAndLinks(t, dir, data, content)

	res, body = n.request("POST", "/api/servers/"+srv+"/files/compress", map[string]any{"root": "/", "files": []string{"big.img", "links"}, "name": "both", "extension": "tar.gz"}, "")
	if res.StatusCode != 200 {
		t.Fatalf("compress: %d %s", res.StatusCode, body)
	}
	var stat struct {
		Name string `json:"name"`
		Size int64  `json:"size"`
	}
	if err := json.Unmarshal(body, &stat); err != nil {
		t.Fatal(err)
	}
	if stat.Size > 8<<20 {
		t.Fatalf("the compressed archive %s is %d bytes", stat.Name, stat.Size)
	}
	n.assertAnswersEveryFace(t, srv)
}

// TestBackupRepositorySparseAttack: with system.backups.format: repository
// the backup of the same tree completes in seconds (before: the 8 TiB of
// zeros were read and chunked, hours), the repository grows by about the
// data (~5 MiB: the file's 1 MiB and the linked file's 4 MiB once; the
// 127 later names are link entries, not 127 more first chunks under their
// own headers), the restore gives the sparse file back with its holes and
// the names as one inode, and the signed download is a ~5 MiB archive in
// which the file is a sparse entry.
func TestBackupRepositorySparseAttack(t *testing.T) {
	t.Parallel()
	n, srv, data, content := sparseLinksNode(t, func(c *config.Config) { c.System.Backups.Format = config.BackupFormatRepository })
	dir := n.serverDir(srv)
	id := newBackupID()
	start := time.Now()
	res, body := n.request("POST", "/api/servers/"+srv+"/backup", map[string]any{"adapter": "local", "uuid": id}, "")
	if res.StatusCode != 202 {
		t.Fatalf("backup: %d %s", res.StatusCode, body)
	}
	st := n.waitBackupStatus(id, 90*time.Second)
	t.Logf("repository backup reported after %s", time.Since(start).Round(time.Millisecond))
	if !st.Successful {
		t.Fatalf("backup failed\n%s", n.log)
	}
	if used := repoUsage(t, n.repoDir()); used > 8<<20 {
		t.Fatalf("the repository holds %d bytes of packs for ~5 MiB of data", used)
	}
	res, body = n.request("POST", "/api/servers/"+srv+"/backup/"+id+"/restore", map[string]any{"adapter": "local", "truncate_directory": true}, "")
	if res.StatusCode != 202 {
		t.Fatalf("restore: %d %s", res.StatusCode, body)
	}
	if !n.waitRestoreStatus(id, 90*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
	checkSparseAndLinks(t, dir, data, content)
	tok := n.signURL(map[string]any{"server_uuid": srv, "backup_uuid": id, "unique_id": uuid.NewString()})
	dres, dl := n.get("/download/backup?token=" + tok)
	if dres.StatusCode != 200 || len(dl) > 8<<20 {
		t.Fatalf("download: %d, %d bytes", dres.StatusCode, len(dl))
	}
	hdrs := tree.Headers(t, bytes.NewReader(dl))
	if h := hdrs["big.img"]; h == nil || h.Size != sparseApparent || h.PAXRecords["GNU.sparse.major"] != "1" {
		t.Fatalf("big.img in the download: %+v", h)
	}
}

// TestTransferSparseAndHardLinks: a classic transfer of the tree to a node
// where the server is limited to 32 MiB completes (before: 8 TiB of zeros
// to read and send, and 512 MiB of names over the target's limit), and the
// target holds the sparse file with its holes and the 128 names as one
// inode.
func TestTransferSparseAndHardLinks(t *testing.T) {
	parallelDocker(t)
	id := uuid.NewString()
	s := transferServer(t, id)
	s.Settings["build"] = map[string]any{"memory_limit": 128, "swap": 0, "cpu_limit": 100, "disk_space": 32}
	c := startCluster(t, []devpanel.Server{s}, nil)
	data, content := writeSparseAndLinks(t, c.Source.dataDir(id))
	start := time.Now()
	c.startTransfer(id)
	c.waitReports(c.Target, id, []string{"success"}, 120*time.Second)
	t.Logf("transfer reported after %s", time.Since(start).Round(time.Millisecond))
	checkSparseAndLinks(t, c.Target.dataDir(id), data, content)
}

// TestBackupObjectStoreSparseAndLinks: an object-store backup of the tree
// asks the panel for part URLs for a few MiB (before: the 8 TiB counted
// whole in the bound, which refused the backup at once) and uploads a
// ~5 MiB object (before: 512 MiB for the names) holding the sparse entry
// and the link entries.
func TestBackupObjectStoreSparseAndLinks(t *testing.T) {
	t.Parallel()
	store := objectstore.Start(t)
	n, srv, _, _ := sparseLinksNode(t)
	id := newBackupID()
	var upload *objectstore.Upload
	var asked int64
	n.Panel.SetBackupUploadURLs(func(backup string, size int64) ([]string, int64, error) {
		u, err := store.NewUpload(context.Background(), backup+".tar.gz", 5<<20)
		if err != nil {
			return nil, 0, err
		}
		upload, asked = u, size
		urls, err := u.PartURLs(context.Background(), size)
		return urls, u.PartSize, err
	})
	res, body := n.request("POST", "/api/servers/"+srv+"/backup", map[string]any{"adapter": "s3", "uuid": id}, "")
	if res.StatusCode != 202 {
		t.Fatalf("backup: %d %s", res.StatusCode, body)
	}
	st := n.waitBackupStatus(id, 90*time.Second)
	t.Logf("asked for %d bytes of part URLs, uploaded %d", asked, st.Size)
	if !st.Successful {
		t.Fatalf("backup failed\n%s", n.log)
	}
	if asked > 64<<20 || st.Size > 8<<20 {
		t.Fatalf("bound %d, object %d bytes", asked, st.Size)
	}
	etags := make([]string, len(st.Parts))
	for i, raw := range st.Parts {
		var p map[string]any
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		etags[i], _ = p["etag"].(string)
	}
	if err := upload.Complete(context.Background(), etags); err != nil {
		t.Fatal(err)
	}
	obj, err := store.Get(context.Background(), id+".tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	hdrs := tree.Headers(t, obj)
	if h := hdrs["big.img"]; h == nil || h.Size != sparseApparent || h.PAXRecords["GNU.sparse.major"] != "1" {
		t.Fatalf("big.img in the object: %+v", h)
	}
	if h := hdrs["links/n127"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "links/n0" {
		t.Fatalf("links/n127 in the object: %+v", h)
	}
}
