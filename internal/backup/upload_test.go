package backup

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/panel"
)

// partStore is a stand-in for presigned part URLs: it keeps each part's
// body and answers with an ETag, or 403 for the parts in refuse. A part
// after a refused one is answered only once a refusal was sent, so that a
// test sees what the uploader does once it knows of the failure (not a
// later part that happened to finish first).
type partStore struct {
	mu      sync.Mutex
	parts   map[int][]byte
	tried   map[int]int
	refuse  map[int]bool
	refused chan struct{} // closed once a refusal was sent
	once    sync.Once
}

func (s *partStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(r.URL.Query().Get("partNumber"))
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.tried[n]++
	refused, after := s.refuse[n], false
	for k := range s.refuse {
		after = after || n > k
	}
	s.mu.Unlock()
	if refused {
		w.WriteHeader(http.StatusForbidden)
		w.(http.Flusher).Flush()
		s.once.Do(func() { close(s.refused) })
		return
	}
	if after {
		select {
		case <-s.refused:
		case <-time.After(10 * time.Second):
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parts[n] = body
	w.Header().Set("ETag", fmt.Sprintf(`"etag-%d"`, n))
}

func newPartStore(refuse map[int]bool) *partStore {
	return &partStore{parts: map[int][]byte{}, tried: map[int]int{}, refuse: refuse, refused: make(chan struct{})}
}

func streamTest(t *testing.T, slots, urlCount int, partSize int64, refuse map[int]bool, data []byte) (*partStore, []panel.BackupPart, error) {
	ps := newPartStore(refuse)
	srv := httptest.NewServer(ps)
	t.Cleanup(srv.Close)
	urls := panel.BackupUploadURLs{PartSize: partSize}
	for i := range urlCount {
		urls.Parts = append(urls.Parts, srv.URL+"/obj?partNumber="+strconv.Itoa(i+1))
	}
	dir := t.TempDir()
	var mu sync.Mutex
	peak := 0
	newPart := func() (*os.File, error) {
		f, err := os.CreateTemp(dir, "part-")
		entries, _ := os.ReadDir(dir)
		mu.Lock()
		peak = max(peak, len(entries))
		mu.Unlock()
		return f, err
	}
	parts, err := streamParts(context.Background(), urls, slots, newPart, nil, func(w io.Writer) error {
		// Writes of uneven sizes, across part boundaries.
		for rest := data; len(rest) > 0; {
			k := min(len(rest), 1+len(rest)%(300<<10))
			if _, err := w.Write(rest[:k]); err != nil {
				return err
			}
			rest = rest[k:]
		}
		return nil
	})
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("%d part files left", len(entries))
	}
	if peak > slots {
		t.Errorf("%d part files at once", peak)
	}
	return ps, parts, err
}

func TestStreamPartsUploadsInOrder(t *testing.T) {
	data := make([]byte, 7<<20+12345)
	rand.Read(data)
	ps, parts, err := streamTest(t, 2, 20, 1<<20, nil, data)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 8 {
		t.Fatalf("%d parts", len(parts))
	}
	var got bytes.Buffer
	for i, p := range parts {
		if p.PartNumber != i+1 || p.ETag != fmt.Sprintf(`"etag-%d"`, i+1) {
			t.Fatalf("part %d: %+v", i, p)
		}
		got.Write(ps.parts[i+1])
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatal("the parts do not make the data")
	}
	// More room on disk, more parts at once, the same object.
	ps, parts, err = streamTest(t, 4, 20, 1<<20, nil, data)
	if err != nil || len(parts) != 8 {
		t.Fatalf("%d parts, %v", len(parts), err)
	}
	got.Reset()
	for i := range parts {
		got.Write(ps.parts[i+1])
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatal("the parts do not make the data (4 on disk)")
	}
}

func TestStreamPartsOutgrowsBound(t *testing.T) {
	data := make([]byte, 5<<20)
	_, _, err := streamTest(t, 2, 3, 1<<20, nil, data)
	if !errors.Is(err, ErrArchiveOutgrewBound) {
		t.Fatalf("err = %v", err)
	}
}

func TestStreamPartsStopsAtFailedPart(t *testing.T) {
	data := make([]byte, 12<<20)
	ps, _, err := streamTest(t, 2, 20, 1<<20, map[int]bool{3: true}, data)
	if err == nil || !strings.Contains(err.Error(), "part 3") {
		t.Fatalf("err = %v", err)
	}
	ps.mu.Lock() // a cancelled request may still be read by the server
	defer ps.mu.Unlock()
	for n := range ps.tried {
		if n > 4 {
			t.Fatalf("part %d tried after part 3 failed: %v", n, ps.tried)
		}
	}
}

func TestStreamPartsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewServer(newPartStore(nil))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	urls := panel.BackupUploadURLs{PartSize: 1 << 20, Parts: []string{srv.URL + "/?partNumber=1", srv.URL + "/?partNumber=2", srv.URL + "/?partNumber=3"}}
	_, err := streamParts(ctx, urls, 2, func() (*os.File, error) { return os.CreateTemp(dir, "part-") }, nil, func(w io.Writer) error {
		w.Write(make([]byte, 1500<<10))
		cancel()
		_, err := w.Write(make([]byte, 10))
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Clean(dir)); len(entries) != 0 {
		t.Fatalf("%d part files left", len(entries))
	}
}

// The Pelican panel's max_concurrent_uploads bounds the parts uploaded at
// once, whatever system.backups.object_store_parts_on_disk allows; the
// object is the same.
func TestStreamPartsKeepsThePanelsUploadLimit(t *testing.T) {
	var mu sync.Mutex
	inFlight, peak := 0, 0
	ps := newPartStore(nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		// A slow store (the point of the test): each upload lasts while the
		// next parts are cut, so that a missing limit shows as uploads at once.
		time.Sleep(100 * time.Millisecond)
		ps.ServeHTTP(w, r)
		mu.Lock()
		inFlight--
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	data := make([]byte, 6<<20)
	rand.Read(data)
	for _, tc := range []struct{ panelMax, onDisk, want int }{{1, 4, 1}, {0, 4, 4}, {10, 3, 3}} {
		mu.Lock()
		peak = 0
		mu.Unlock()
		ps.parts = map[int][]byte{}
		urls := panel.BackupUploadURLs{PartSize: 1 << 20, MaxConcurrentUploads: tc.panelMax}
		for i := range 8 {
			urls.Parts = append(urls.Parts, srv.URL+"/obj?partNumber="+strconv.Itoa(i+1))
		}
		dir := t.TempDir()
		parts, err := streamParts(context.Background(), urls, tc.onDisk, func() (*os.File, error) { return os.CreateTemp(dir, "part-") }, nil, func(w io.Writer) error {
			_, err := w.Write(data)
			return err
		})
		if err != nil || len(parts) != 6 {
			t.Fatalf("%+v: %d parts, %v", tc, len(parts), err)
		}
		var got bytes.Buffer
		for i := range parts {
			got.Write(ps.parts[i+1])
		}
		if !bytes.Equal(got.Bytes(), data) {
			t.Fatalf("%+v: the parts do not make the data", tc)
		}
		mu.Lock()
		p := peak
		mu.Unlock()
		if p > tc.want || tc.want == 1 && p != 1 {
			t.Fatalf("%+v: %d uploads at once, want at most %d", tc, p, tc.want)
		}
	}
}
