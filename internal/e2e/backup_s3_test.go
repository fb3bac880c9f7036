package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/objectstore"
)

// TestBackupObjectStore uploads a backup in parts to a real S3-compatible
// server through URLs presigned by the fake panel; part 2 fails twice with
// 500 first. The test completes the upload with the reported ETags and
// compares the object with a local backup of the same tree.
func TestBackupObjectStore(t *testing.T) {
	t.Parallel()
	store := objectstore.Start(t)
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{gameServer(backupServer)}})
	dir := n.serverDir(backupServer)
	big := make([]byte, 13<<20) // incompressible: three 5 MiB parts
	rand.Read(big)
	os.WriteFile(filepath.Join(dir, "world.bin"), big, 0o644)
	writeFiles(t, dir, map[string]string{"server.properties": "motd=s3\n"})

	// A proxy in front of the store that fails the first two tries of part 2.
	target, _ := url.Parse(store.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	failures := 0
	var part2Tries int
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("partNumber") == "2" {
			mu.Lock()
			part2Tries++
			fail := failures < 2
			if fail {
				failures++
			}
			mu.Unlock()
			if fail {
				io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20)) // read a little, then fail
				w.WriteHeader(500)
				return
			}
		}
		r.Host = target.Host // the signature covers the store's host
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)

	id := newBackupID()
	var upload *objectstore.Upload
	n.Panel.SetBackupUploadURLs(func(backup string, size int64) ([]string, int64, error) {
		u, err := store.NewUpload(context.Background(), backup+".tar.gz", 5<<20)
		if err != nil {
			return nil, 0, err
		}
		upload = u
		urls, err := u.PartURLs(context.Background(), size)
		for i := range urls {
			urls[i] = strings.Replace(urls[i], store.URL, proxy.URL, 1)
		}
		return urls, u.PartSize, err
	})
	start := time.Now()
	st := n.backup(id, "s3", "")
	t.Logf("object_store backup of %d bytes in %s", st.Size, time.Since(start))
	if !st.Successful || len(st.Parts) != 3 {
		t.Fatalf("status %+v\n%s", st, n.log)
	}
	if part2Tries != 3 {
		t.Fatalf("part 2 tried %d times, want 3", part2Tries)
	}
	etags := make([]string, len(st.Parts))
	for i, raw := range st.Parts {
		var p map[string]any
		json.Unmarshal(raw, &p)
		if p["part_number"] != float64(i+1) || p["PartNumber"] != float64(i+1) || p["etag"] == "" || p["etag"] != p["ETag"] {
			t.Fatalf("part %d = %v", i, p)
		}
		etags[i] = p["etag"].(string)
	}
	if err := upload.Complete(context.Background(), etags); err != nil {
		t.Fatalf("completing the upload with the reported ETags: %v", err)
	}
	body, err := store.Get(context.Background(), id+".tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	h := sha1.New()
	size, err := io.Copy(h, body)
	if err != nil {
		t.Fatal(err)
	}
	if size != st.Size || hex.EncodeToString(h.Sum(nil)) != st.Checksum {
		t.Fatalf("object: %d bytes sha1 %x; reported %d %s", size, h.Sum(nil), st.Size, st.Checksum)
	}
	// The local copy is gone.
	entries, _ := os.ReadDir(n.Config.System.BackupDirectory)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tar.gz") {
			t.Fatalf("local copy left: %s", e.Name())
		}
	}
	// Byte for byte: the object is the archive whose SHA-1 and size were
	// reported, and it is a gzip stream.
	obj, err := store.Get(context.Background(), id+".tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 2)
	io.ReadFull(obj, head)
	obj.Close()
	if !bytes.Equal(head, []byte{0x1f, 0x8b}) {
		t.Fatal("the object is not gzip")
	}
}

// TestBackupObjectStoreFailureReported: a part that always fails ends as
// successful:false and leaves no local file.
func TestBackupObjectStoreFailureReported(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{gameServer(backupServer)}})
	writeFiles(t, n.serverDir(backupServer), map[string]string{"a": "a"})
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(403) }))
	t.Cleanup(bad.Close)
	n.Panel.SetBackupUploadURLs(func(string, int64) ([]string, int64, error) {
		return []string{bad.URL + "/part1?X-Amz-Signature=topsecret"}, 5 << 20, nil
	})
	id := newBackupID()
	st := n.backup(id, "object_store", "")
	if st.Successful || st.Checksum != "" || st.Size != 0 {
		t.Fatalf("status %+v", st)
	}
	if strings.Contains(n.log.String(), "topsecret") {
		t.Fatal("a presigned query was logged")
	}
	entries, _ := os.ReadDir(n.Config.System.BackupDirectory)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tar.gz") {
			t.Fatalf("file left: %s", e.Name())
		}
	}
}
