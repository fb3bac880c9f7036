package backup

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/testutil/bench"
	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// benchServer is what a backup needs of a server, over a plain directory.
type benchServer struct{ files *sandbox.FS }

func (s benchServer) UUID() string            { return "bench" }
func (s benchServer) Files() sandbox.ReadOnly { return s.files.ReadOnly() }
func (s benchServer) Publish(events.Event)    {}
func (s benchServer) BeginJob(ctx context.Context, kind server.JobKind, _ ...context.Context) (*server.Job, error) {
	return server.JobOver(ctx, kind, s.files), nil
}
func (s benchServer) StopForJob(context.Context, time.Duration) error { return nil }

// benchTreeMB is the size of the benchmarks' game-server tree in MiB:
// WHARF_BENCH_TREE_MB, 1 GiB by default.
func benchTreeMB() int64 {
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
		return int64(v)
	}
	return 1024
}

// benchPartSize is the part size the fake panel hands out. (The panels'
// default is 5 GiB, one part for most servers: nothing to upload side by
// side. Operators who want parallel uploads lower it.)
const benchPartSize = 64 << 20

// BenchmarkObjectStoreBackup: an object_store backup of the game-server tree
// (createRemote: URLs from the panel for a bound of the size, the archive
// cut into parts uploaded while it is compressed, two at a time or
// WHARF_BENCH_PARTS_ON_DISK) against a real
// S3-compatible server (versitygw), next to the reference: the same archive,
// then the parts uploaded one after another. "loopback" talks to the store
// directly; "wan" puts a link model in front of it, as a remote store is
// reached: each connection carries at most wanConnRate and every request
// waits wanRTT first.
func BenchmarkObjectStoreBackup(b *testing.B) {
	mb := benchTreeMB()
	dir := b.TempDir()
	total, err := tree.GameServer(filepath.Join(dir, "src"), mb<<20)
	if err != nil {
		b.Fatal(err)
	}
	srv := benchServer{tree.Open(b, filepath.Join(dir, "src"))}
	store := objectstore.Start(b)

	b.Run("loopback", func(b *testing.B) {
		benchObjectStore(b, dir, total, srv, store, store.URL)
	})
	b.Run("wan", func(b *testing.B) {
		benchObjectStore(b, dir, total, srv, store, wanLink(b, store.URL))
	})
}

const (
	wanConnRate = 25 << 20 // bytes per second on one connection
	wanRTT      = 30 * time.Millisecond
)

// wanLink starts a proxy to target that models a long link: one round trip
// of delay per request and at most wanConnRate bytes per second read from
// each request body.
func wanLink(b *testing.B, target string) string {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The modelled round trip: the delay is the point.
		time.Sleep(wanRTT)
		r.Host = u.Host // the signature covers the store's host
		if r.Body != nil {
			r.Body = &paced{r: r.Body, start: time.Now()}
		}
		rp.ServeHTTP(w, r)
	}))
	b.Cleanup(p.Close)
	return p.URL
}

// paced reads at most wanConnRate bytes per second since start.
type paced struct {
	r     io.ReadCloser
	start time.Time
	n     int64
}

func (p *paced) Read(b []byte) (int, error) {
	if len(b) > 64<<10 {
		b = b[:64<<10]
	}
	due := p.start.Add(time.Duration(float64(p.n) / wanConnRate * float64(time.Second)))
	time.Sleep(time.Until(due)) // the modelled link rate: pacing is the point
	n, err := p.r.Read(b)
	p.n += int64(n)
	return n, err
}

func (p *paced) Close() error { return p.r.Close() }

func benchObjectStore(b *testing.B, dir string, total int64, srv benchServer, store *objectstore.Store, endpoint string) {
	var mu sync.Mutex // the panel answers on its own goroutines
	uploads := map[string]*objectstore.Upload{}
	dp := devpanel.New("tid", "token")
	dp.SetBackupUploadURLs(func(backup string, size int64) ([]string, int64, error) {
		u, err := store.NewUpload(context.Background(), backup, benchPartSize)
		if err != nil {
			return nil, 0, err
		}
		mu.Lock()
		uploads[backup] = u
		mu.Unlock()
		urls, err := u.PartURLs(context.Background(), size)
		for i := range urls {
			urls[i] = strings.Replace(urls[i], store.URL, endpoint, 1)
		}
		return urls, benchPartSize, err
	})
	ps := httptest.NewServer(dp.Handler())
	defer ps.Close()
	c := config.Defaults()
	c.System.BackupDirectory = filepath.Join(dir, "backups")
	c.System.TmpDirectory = filepath.Join(dir, "tmp")
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_PARTS_ON_DISK")); err == nil && v > 0 {
		c.System.Backups.ObjectStorePartsOnDisk = v
	}
	cfg := config.NewStore(filepath.Join(dir, "config.yml"), c)
	client := panel.New(func() panel.Settings {
		return panel.Settings{Remote: ps.URL, TokenID: "tid", Token: "token", Timeout: time.Minute}
	}, "bench")
	svc := New(context.Background(), cfg, client, slog.New(slog.DiscardHandler))
	defer svc.Close()
	ctx := context.Background()

	n := 0
	bench.Paired(b, total, func() func() {
		n++
		id := "ours-" + strconv.Itoa(n)
		d, err := svc.createRemote(ctx, srv, id, "")
		if err != nil {
			b.Fatal(err)
		}
		return func() {
			if n == 1 { // the object is the archive that was reported
				mu.Lock()
				u := uploads[id]
				mu.Unlock()
				checkObject(b, store, u, d)
			}
		}
	}, func() func() {
		n++
		id := "ref-" + strconv.Itoa(n)
		f, res, err := svc.writeArchive(ctx, srv, "", false)
		if err != nil {
			b.Fatal(err)
		}
		defer os.Remove(f.Name())
		defer f.Close()
		urls, err := client.BackupUploadURLs(ctx, id, res.Size)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := UploadParts(ctx, f, res.Size, urls, nil, 1); err != nil {
			b.Fatal(err)
		}
		return nil
	})
}

// checkObject completes the upload with the reported ETags and compares the
// object's size and SHA-1 with the reported ones.
func checkObject(b *testing.B, store *objectstore.Store, u *objectstore.Upload, d Details) {
	etags := make([]string, len(d.Parts))
	for i, p := range d.Parts {
		etags[i] = p.ETag
	}
	if err := u.Complete(context.Background(), etags); err != nil {
		b.Fatal(err)
	}
	r, err := store.Get(context.Background(), u.Key)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	h := sha1.New()
	size, err := io.Copy(h, r)
	if err != nil || size != d.Size || hex.EncodeToString(h.Sum(nil)) != d.Checksum {
		b.Fatalf("object: %d bytes, sha1 %x, %v; reported %d %s", size, h.Sum(nil), err, d.Size, d.Checksum)
	}
}
