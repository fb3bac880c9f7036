package pull

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/testutil/bench"
)

// BenchmarkPull: a download of a WHARF_BENCH_TREE_MB MiB file (1024 by
// default) from a local HTTP server into a server's sandbox, next to
// `curl -o` of the same URL to the same disk.
func BenchmarkPull(b *testing.B) {
	mb := int64(1024)
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
		mb = int64(v)
	}
	dir := b.TempDir()
	src := filepath.Join(dir, "src.bin")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.CopyN(f, rand.Reader, mb<<20); err != nil {
		b.Fatal(err)
	}
	f.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, src) }))
	defer srv.Close()
	root := filepath.Join(dir, "server")
	fsys, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1, Denylist: []string{"*.secret"}})
	if err != nil {
		b.Fatal(err)
	}
	defer fsys.Close()
	svc := New(context.Background(), Options{MaxRedirects: 10, AllowLoopback: true})
	defer svc.Close()
	bench.WarmMemory(b, int(2*mb<<20))
	bench.Paired(b, mb<<20, func() func() {
		d, err := svc.Begin("bench", fsys, Request{URL: srv.URL + "/file.bin", Root: "/"})
		if err != nil {
			b.Fatal(err)
		}
		name, err := svc.Run(context.Background(), d)
		if err != nil {
			b.Fatal(err)
		}
		return func() { _ = fsys.Remove(name) }
	}, func() func() {
		out := filepath.Join(dir, "curl.bin")
		if o, err := exec.Command("curl", "-sS", "-o", out, srv.URL+"/file.bin").CombinedOutput(); err != nil {
			b.Fatal(err, string(o))
		}
		return func() { os.Remove(out) }
	})
}
