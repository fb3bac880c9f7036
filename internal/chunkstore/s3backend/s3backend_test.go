package s3backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/chunkstore/backendtest"
	"github.com/wharf/wharf/internal/testutil/objectstore"
)

// startStore runs a real versitygw. Without the binary the test is skipped,
// or fails when WHARF_REQUIRE_DOCKER=1 (as for the tests that need Docker:
// make test and CI set it, and install versitygw).
func startStore(t *testing.T) *objectstore.Store {
	t.Helper()
	return objectstore.StartOrSkip(t)
}

func options(s *objectstore.Store, prefix string) Options {
	return Options{
		Endpoint: s.URL, Bucket: s.Bucket, Prefix: prefix, AccessKeyID: s.Access, SecretAccessKey: s.Secret,
		PathStyle: true, MaxBackoff: 10 * time.Millisecond,
	}
}

func newBackend(t *testing.T, o Options) *Backend {
	t.Helper()
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The conformance suite, under a prefix of its own for each test.
func TestConformance(t *testing.T) {
	s := startStore(t)
	backendtest.Run(t, func(t *testing.T) chunkstore.Backend {
		return newBackend(t, options(s, "wharf/"+t.Name()))
	})
}

// The conformance suite at the root of a bucket of its own for each test.
func TestConformanceBucketRoot(t *testing.T) {
	s := startStore(t)
	n := 0
	backendtest.Run(t, func(t *testing.T) chunkstore.Backend {
		n++
		bucket := fmt.Sprintf("root-%d", n)
		if _, err := s.Client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
			t.Fatal(err)
		}
		o := options(s, "")
		o.Bucket = bucket
		return newBackend(t, o)
	})
}

// Two prefixes in one bucket are two repositories; the keys in the bucket
// are <prefix>/<name>.
func TestPrefixIsolation(t *testing.T) {
	s := startStore(t)
	ctx := context.Background()
	a, b := newBackend(t, options(s, "/pool/node-a/")), newBackend(t, options(s, "pool/node-b"))
	if err := a.Put(ctx, "packs/x", []byte("from a")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "packs/x", 0, -1); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("b sees a's object: %v", err)
	}
	if list, err := b.List(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("b lists %+v, %v", list, err)
	}
	out, err := s.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("pool/node-a/packs/x")})
	if err != nil {
		t.Fatalf("the key in the bucket is not <prefix>/<name>: %v", err)
	}
	out.Body.Close()
	if got := a.String(); got != "s3://backups/pool/node-a/" {
		t.Fatalf("String() = %q", got)
	}
}

// fault sits between the backend and versitygw: answer decides, per
// request, a status and body to send instead of forwarding (status 0
// forwards). It counts the requests.
type fault struct {
	mu       sync.Mutex
	requests []string // "METHOD path?query"
	answer   func(r *http.Request, n int) (int, string)
	// cut, when it returns a body, sends its length and half of it, then
	// breaks the connection.
	cut func(r *http.Request) []byte
}

func (f *fault) start(t *testing.T, s *objectstore.Store) string {
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ErrorLog = log.New(io.Discard, "", 0) // requests the client cancels
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
		n := len(f.requests)
		f.mu.Unlock()
		if f.cut != nil {
			if body := f.cut(r); body != nil {
				w.Header().Set("Content-Length", fmt.Sprint(len(body)))
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(body[:len(body)/2])
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			}
		}
		if f.answer != nil {
			if status, body := f.answer(r, n); status != 0 {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(status)
				fmt.Fprint(w, body)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (f *fault) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func (f *fault) count(method, query string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.requests {
		if strings.HasPrefix(r, method+" ") && strings.Contains(r, query) {
			n++
		}
	}
	return n
}

func s3Error(code string) string {
	return `<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>injected</Message></Error>`
}

// 5xx and throttling answers are retried until one succeeds.
func TestRetriesServerErrorsAndThrottling(t *testing.T) {
	s := startStore(t)
	for _, tc := range []struct {
		status int
		code   string
	}{{503, "SlowDown"}, {500, "InternalError"}, {502, "BadGateway"}, {429, "TooManyRequests"}, {400, "RequestTimeout"}} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			f := &fault{answer: func(r *http.Request, n int) (int, string) {
				if n <= 2 {
					return tc.status, s3Error(tc.code)
				}
				return 0, ""
			}}
			o := options(s, t.Name())
			o.Endpoint = f.start(t, s)
			b := newBackend(t, o)
			data := bytes.Repeat([]byte("pack"), 1000)
			if err := b.Put(context.Background(), "packs/p", data); err != nil {
				t.Fatalf("Put after two %d answers: %v", tc.status, err)
			}
			if n := f.count("PUT", ""); n != 3 {
				t.Fatalf("%d PUT requests, want 3 (two refused, one stored)", n)
			}
			got, err := b.Get(context.Background(), "packs/p", 0, -1)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Get after the retried Put: %d bytes, %v", len(got), err)
			}
		})
	}
}

// A 4xx is final: one request, and the error says what the store said.
func TestNoRetryOnClientErrors(t *testing.T) {
	s := startStore(t)
	for _, tc := range []struct {
		status int
		code   string
	}{{403, "AccessDenied"}, {400, "InvalidArgument"}, {409, "OperationAborted"}} {
		t.Run(tc.code, func(t *testing.T) {
			f := &fault{answer: func(*http.Request, int) (int, string) { return tc.status, s3Error(tc.code) }}
			o := options(s, t.Name())
			o.Endpoint = f.start(t, s)
			b := newBackend(t, o)
			err := b.Put(context.Background(), "packs/p", []byte("x"))
			if err == nil || !strings.Contains(err.Error(), tc.code) {
				t.Fatalf("Put = %v, want the store's %s", err, tc.code)
			}
			if _, err := b.Get(context.Background(), "packs/p", 0, -1); err == nil || errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Get = %v, want an error that is not fs.ErrNotExist", err)
			}
			if n := f.total(); n != 2 {
				t.Fatalf("%d requests for a Put and a Get refused with %d, want 2 (no retry)", n, tc.status)
			}
		})
	}
}

// After MaxAttempts failures the request fails.
func TestGivesUpAfterMaxAttempts(t *testing.T) {
	s := startStore(t)
	f := &fault{answer: func(*http.Request, int) (int, string) { return 503, s3Error("ServiceUnavailable") }}
	o := options(s, "")
	o.Endpoint, o.MaxAttempts = f.start(t, s), 3
	b := newBackend(t, o)
	if _, err := b.List(context.Background(), "packs/"); err == nil {
		t.Fatal("List succeeded against a store that always answers 503")
	}
	if n := f.total(); n != 3 {
		t.Fatalf("%d requests, want MaxAttempts = 3", n)
	}
}

// Listings page through continuation tokens.
func TestListPaginates(t *testing.T) {
	s := startStore(t)
	f := &fault{}
	o := options(s, "paged")
	o.Endpoint, o.PageSize = f.start(t, s), 7
	b := newBackend(t, o)
	var want []string
	for i := range 45 {
		name := fmt.Sprintf("packs/%02x/%03d", i%5, i)
		want = append(want, name)
		if err := b.Put(context.Background(), name, []byte(name)); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	list, err := b.List(context.Background(), "packs/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range list {
		got = append(got, o.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("List = %d names %q, want the 45 put, sorted", len(got), got)
	}
	if n := f.count("GET", "list-type=2"); n != 7 {
		t.Fatalf("%d list requests for 45 objects by pages of 7, want 7", n)
	}
	if n := f.count("GET", "continuation-token="); n != 6 {
		t.Fatalf("%d list requests carry a continuation token, want 6", n)
	}
}

// More objects than one page of the store's own size (1000): List follows
// the continuation tokens of the real default paging.
func TestListMoreThanOnePage(t *testing.T) {
	if testing.Short() {
		t.Skip("puts 1100 objects")
	}
	s := startStore(t)
	f := &fault{}
	o := options(s, "many")
	o.Endpoint = f.start(t, s)
	b := newBackend(t, o)
	const n = 1100
	names := make(chan string)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range 8 {
		wg.Go(func() {
			for name := range names {
				errs <- b.Put(context.Background(), name, []byte(name))
			}
		})
	}
	for i := range n {
		names <- fmt.Sprintf("packs/%04d", i)
	}
	close(names)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	list, err := b.List(context.Background(), "packs/")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n || list[0].Name != "packs/0000" || list[n-1].Name != fmt.Sprintf("packs/%04d", n-1) {
		t.Fatalf("List = %d objects, want %d from packs/0000 to packs/%04d", len(list), n, n-1)
	}
	if pages := f.count("GET", "list-type=2"); pages < 2 {
		t.Fatalf("%d list requests for %d objects: no second page was asked for", pages, n)
	}
}
