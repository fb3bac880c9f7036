package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/objectstore"
)

// diskWatch samples the disk used by the files under some directories
// (allocated blocks) until stopped, and keeps the peak. A sample can miss
// a peak that lasts less than its period, never invent one: the figure is
// a lower bound of the true peak, enough to tell two parts from a staged
// archive.
type diskWatch struct {
	dirs      []string
	stop      chan struct{}
	done      chan struct{}
	peak      atomic.Int64
	peakFiles atomic.Int64
	samples   atomic.Int64
}

func watchDisk(t *testing.T, dirs ...string) *diskWatch {
	w := &diskWatch{dirs: dirs, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			used, files := w.sample()
			w.samples.Add(1)
			if used > w.peak.Load() {
				w.peak.Store(used)
			}
			if files > w.peakFiles.Load() {
				w.peakFiles.Store(files)
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *diskWatch) sample() (used, files int64) {
	for _, d := range w.dirs {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return nil
			}
			var st syscall.Stat_t
			if syscall.Lstat(p, &st) == nil {
				used += st.Blocks * 512
				files++
			}
			return nil
		})
	}
	return used, files
}

func (w *diskWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// s3Panel plays the panel's side of remote backups: it creates the
// multipart upload and presigns part URLs for the size the agent announces
// (rewritten to go through via when set), and remembers both.
type s3Panel struct {
	mu        sync.Mutex
	upload    *objectstore.Upload
	announced int64
}

func (p *s3Panel) install(n *node, store *objectstore.Store, partSize int64, via string, before func()) {
	n.Panel.SetBackupUploadURLs(func(backup string, size int64) ([]string, int64, error) {
		if before != nil {
			before()
		}
		u, err := store.NewUpload(context.Background(), backup+".tar.gz", partSize)
		if err != nil {
			return nil, 0, err
		}
		urls, err := u.PartURLs(context.Background(), size)
		if via != "" {
			for i := range urls {
				urls[i] = strings.Replace(urls[i], store.URL, via, 1)
			}
		}
		p.mu.Lock()
		p.upload, p.announced = u, size
		p.mu.Unlock()
		return urls, u.PartSize, err
	})
}

// finish completes the upload with the reported parts when the backup
// succeeded and aborts it otherwise, as the panel's status endpoint does.
func (p *s3Panel) finish(t *testing.T, st backupStatus) {
	t.Helper()
	p.mu.Lock()
	u := p.upload
	p.mu.Unlock()
	if u == nil {
		t.Fatal("the agent never asked for upload URLs")
	}
	if !st.Successful {
		if err := u.Abort(context.Background()); err != nil {
			t.Fatalf("aborting the upload: %v", err)
		}
		return
	}
	etags := make([]string, len(st.Parts))
	for i, raw := range st.Parts {
		var part struct {
			N    int    `json:"part_number"`
			ETag string `json:"etag"`
		}
		json.Unmarshal(raw, &part)
		if part.N != i+1 || part.ETag == "" {
			t.Fatalf("part %d reported as %s", i+1, raw)
		}
		etags[i] = part.ETag
	}
	if err := u.Complete(context.Background(), etags); err != nil {
		t.Fatalf("completing the upload with the reported parts: %v", err)
	}
}

// noTempFiles fails when the daemon left files in its backup or temp areas.
func noTempFiles(t *testing.T, n *node) {
	t.Helper()
	for _, d := range []string{n.Config.System.BackupDirectory, n.Config.System.TmpDirectory} {
		filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				t.Errorf("left behind: %s", p)
			}
			return nil
		})
	}
}

func noPendingUploads(t *testing.T, store *objectstore.Store) {
	t.Helper()
	keys, err := store.PendingUploads(context.Background())
	if err != nil || len(keys) != 0 {
		t.Fatalf("pending multipart uploads %v (%v)", keys, err)
	}
}

// TestBackupObjectStoreStreamsWithTwoPartsOnDisk backs up 200 MiB of
// incompressible data in 5 MiB parts: the object is the archive (its files
// read back byte for byte), the announced size is an upper bound that the
// backend presigned enough parts for, only the parts used are reported,
// and the daemon's backup and temp directories never held more than two
// parts (plus 1 MiB for the small spools).
func TestBackupObjectStoreStreamsWithTwoPartsOnDisk(t *testing.T) {
	const partSize = 5 << 20
	store := objectstore.Start(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{gameServer(backupServer)}})
	dir := n.serverDir(backupServer)
	want := map[string]string{}
	for _, name := range []string{"world/region/r.0.mca", "world/region/r.1.mca", "mods/big.jar", "dump.bin"} {
		data := make([]byte, 50<<20)
		rand.Read(data)
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha1.Sum(data)
		want[name] = hex.EncodeToString(sum[:])
	}
	writeFiles(t, dir, map[string]string{"server.properties": "motd=stream\n"})
	want["server.properties"] = hex.EncodeToString(func() []byte { s := sha1.Sum([]byte("motd=stream\n")); return s[:] }())

	var p s3Panel
	p.install(n, store, partSize, "", nil)
	disk := watchDisk(t, n.Config.System.BackupDirectory, n.Config.System.TmpDirectory)
	id := newBackupID()
	start := time.Now()
	res, body := n.request("POST", "/api/servers/"+backupServer+"/backup", map[string]any{"adapter": "s3", "uuid": id}, "")
	if res.StatusCode != 202 {
		t.Fatalf("backup: %d %s", res.StatusCode, body)
	}
	st := n.waitBackupStatus(id, 3*time.Minute)
	took := time.Since(start)
	disk.end()
	t.Logf("backup of %d bytes in %d parts in %s; announced %d; peak disk %d bytes in %d files (%d samples)",
		st.Size, len(st.Parts), took, p.announced, disk.peak.Load(), disk.peakFiles.Load(), disk.samples.Load())
	if !st.Successful {
		t.Fatalf("status %+v\n%s", st, n.log)
	}
	if p.announced < st.Size {
		t.Fatalf("announced %d bytes, the archive has %d", p.announced, st.Size)
	}
	if len(st.Parts) != int((st.Size+partSize-1)/partSize) {
		t.Fatalf("%d parts reported for %d bytes", len(st.Parts), st.Size)
	}
	if peak := disk.peak.Load(); peak > 2*partSize+1<<20 || disk.peakFiles.Load() > 2 {
		t.Fatalf("peak local disk %d bytes in %d files, more than two parts of %d", peak, disk.peakFiles.Load(), partSize)
	}
	if disk.peak.Load() == 0 {
		t.Fatal("no part was ever seen on disk: the watch measured nothing")
	}
	p.finish(t, st)
	noPendingUploads(t, store)
	noTempFiles(t, n)

	obj, err := store.Get(context.Background(), id+".tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	h := sha1.New()
	zr, err := gzip.NewReader(io.TeeReader(obj, h))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	got := map[string]string{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fh := sha1.New()
		io.Copy(fh, tr)
		got[hdr.Name] = hex.EncodeToString(fh.Sum(nil))
	}
	for name, sum := range want {
		if got[name] != sum {
			t.Errorf("%s: sha1 %q in the object, %s on disk", name, got[name], sum)
		}
	}
	if _, err := io.Copy(io.Discard, zr); err != nil { // the tree trailer, and the gzip trailer's check
		t.Fatal(err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != st.Checksum {
		t.Fatalf("object sha1 %s, reported %s", sum, st.Checksum)
	}
}

// TestBackupObjectStoreFailureMidUpload: part 3 is refused for good; the
// backup stops (no part past the next one is tried), reports failure, the
// panel aborts the multipart upload, and nothing is left on the node or in
// the store.
func TestBackupObjectStoreFailureMidUpload(t *testing.T) {
	const partSize = 5 << 20
	store := objectstore.Start(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{gameServer(backupServer)}})
	big := make([]byte, 60<<20)
	rand.Read(big)
	os.WriteFile(filepath.Join(n.serverDir(backupServer), "world.bin"), big, 0o644)

	target, _ := url.Parse(store.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	tried := map[string]int{}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		part := r.URL.Query().Get("partNumber")
		mu.Lock()
		tried[part]++
		mu.Unlock()
		if part == "3" {
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusForbidden)
			return
		}
		r.Host = target.Host
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	var p s3Panel
	p.install(n, store, partSize, proxy.URL, nil)
	id := newBackupID()
	st := n.backup(id, "s3", "")
	if st.Successful || st.Checksum != "" || st.Size != 0 {
		t.Fatalf("status %+v", st)
	}
	mu.Lock()
	t.Logf("parts tried: %v", tried)
	for part := range tried {
		// Part 4 may be filled while part 3 is tried; none after it.
		if i, _ := strconv.Atoi(part); i > 4 {
			t.Errorf("part %s was tried after part 3 failed: %v", part, tried)
		}
	}
	mu.Unlock()
	p.finish(t, st)
	noPendingUploads(t, store)
	if _, err := store.Get(context.Background(), id+".tar.gz"); err == nil {
		t.Fatal("an object was made")
	}
	noTempFiles(t, n)
	if !strings.Contains(n.log.String(), "part 3") {
		t.Fatalf("the failure does not name the part:\n%s", n.log)
	}
}

// TestBackupObjectStoreOutgrowsBound: 48 MiB of files appear after the
// agent announced the size (the panel's answer is where they are written),
// more than the room it keeps for growth; the backup fails cleanly with a
// clear error, uploads nothing past the presigned parts, and leaves nothing.
func TestBackupObjectStoreOutgrowsBound(t *testing.T) {
	store := objectstore.Start(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{gameServer(backupServer)}})
	dir := n.serverDir(backupServer)
	writeFiles(t, dir, map[string]string{"server.properties": "motd=grow\n"})
	var p s3Panel
	p.install(n, store, 5<<20, "", func() {
		big := make([]byte, 48<<20)
		rand.Read(big)
		if err := os.WriteFile(filepath.Join(dir, "new-world.bin"), big, 0o644); err != nil {
			t.Error(err)
		}
	})
	id := newBackupID()
	st := n.backup(id, "s3", "")
	if st.Successful {
		t.Fatalf("a backup larger than announced (%d bytes) succeeded: %+v", p.announced, st)
	}
	// The failure reaches the panel before its log line is written.
	n.waitDaemonLog("outgrew the size announced", 10*time.Second)
	p.finish(t, st)
	noPendingUploads(t, store)
	noTempFiles(t, n)
}

// TestBackupObjectStoreCancelledMidUpload: the server is deleted while a
// part upload hangs; the backup ends at once (not after the part's
// two-hour timeout), reports failure, and leaves no part file behind.
func TestBackupObjectStoreCancelledMidUpload(t *testing.T) {
	store := objectstore.Start(t)
	n := startNode(t, nodeOptions{servers: []devpanel.Server{gameServer(backupServer)}})
	big := make([]byte, 30<<20)
	rand.Read(big)
	os.WriteFile(filepath.Join(n.serverDir(backupServer), "world.bin"), big, 0o644)

	target, _ := url.Parse(store.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	hanging := make(chan struct{}, 1)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("partNumber") == "2" {
			// The body read to its end (or the agent's hang-up), so that
			// the server notices when the connection goes.
			io.Copy(io.Discard, r.Body)
			select {
			case hanging <- struct{}{}:
			default:
			}
			select {
			case <-r.Context().Done(): // the agent gave up
			case <-time.After(time.Minute):
			}
			return
		}
		r.Host = target.Host
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	var p s3Panel
	p.install(n, store, 5<<20, proxy.URL, nil)
	id := newBackupID()
	if res, body := n.request("POST", "/api/servers/"+backupServer+"/backup", map[string]any{"adapter": "s3", "uuid": id}, ""); res.StatusCode != 202 {
		t.Fatalf("backup: %d %s", res.StatusCode, body)
	}
	select {
	case <-hanging:
	case <-time.After(time.Minute):
		t.Fatalf("part 2 never sent\n%s", n.log)
	}
	start := time.Now()
	if res, body := n.request("DELETE", "/api/servers/"+backupServer, nil, ""); res.StatusCode != 204 {
		t.Fatalf("delete: %d %s", res.StatusCode, body)
	}
	st := n.waitBackupStatus(id, 20*time.Second)
	if st.Successful {
		t.Fatalf("status %+v", st)
	}
	t.Logf("failure reported %s after the deletion", time.Since(start).Round(time.Millisecond))
	p.finish(t, st)
	noPendingUploads(t, store)
	noTempFiles(t, n)
}
