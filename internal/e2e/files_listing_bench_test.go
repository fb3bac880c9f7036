package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/devpanel"
)

// BenchmarkListDirectory lists a directory of 10,000 and of 200,000 empty
// files (names of 16 bytes) through list-directory, one listing at a time
// and three at once, on a fresh daemon for each case (so that the memory a
// case leaves behind does not count for the next). ns/op is the client's
// wall time for the round (all the listings of it, read to the end);
// listing-s is the same per listing; rss-growth-MiB/listing is the daemon's
// peak resident memory over the runs (VmRSS sampled every 20 ms) less its
// idle memory, divided by the listings at once; daemon-cpu-s/listing is
// its CPU per listing. WHARF_E2E_BINARY runs another build (the one before
// streaming, for instance).
func BenchmarkListDirectory(b *testing.B) {
	base := b.TempDir()
	for _, entries := range []int{10_000, 200_000} {
		for _, concurrent := range []int{1, 3} {
			b.Run(fmt.Sprintf("entries=%d/concurrent=%d", entries, concurrent), func(b *testing.B) {
				benchListing(b, filepath.Join(base, strconv.Itoa(entries)), entries, concurrent)
			})
		}
	}
}

func benchListing(b *testing.B, src string, entries, concurrent int) {
	if _, err := os.Stat(src); err != nil {
		makeEmptyFiles(b, src, entries)
	}
	s := exampleServer(filesServer)
	n := startNode(b, nodeOptions{servers: []devpanel.Server{s}})
	// The directory moves into this daemon's server and back (a rename:
	// it is made once for the four cases).
	dir := n.fpath("big")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(src, dir); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.Rename(dir, src) })

	client := &http.Client{Timeout: 10 * time.Minute}
	list := func() ([]byte, error) {
		req, _ := http.NewRequest("GET", n.URL+"/api/servers/"+filesServer+"/files/list-directory?directory=big", nil)
		req.Header.Set("Authorization", "Bearer "+n.Token)
		res, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer res.Body.Close()
		var tail bytes.Buffer
		size, err := io.Copy(io.MultiWriter(io.Discard, lastBytes{&tail}), res.Body)
		if err == nil && res.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %d", res.StatusCode)
		}
		return append([]byte(strconv.FormatInt(size, 10)+":"), tail.Bytes()...), err
	}
	idle := n.rssKiB() // before any listing: what a listing leaves counts
	// Once untimed: the answer is whole (every name, once), and its size
	// and end are what each timed run must give.
	if err := n.listHuge("big", entries); err != nil {
		b.Fatal(err)
	}
	want, err := list()
	if err != nil {
		b.Fatal(err)
	}
	var peak, cpu int64
	var wall time.Duration
	runs := 0
	for b.Loop() {
		stop := n.peakRSS()
		cpu0 := n.cpuTicks()
		start := time.Now()
		errs := make(chan error, concurrent)
		var wg sync.WaitGroup
		for range concurrent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := list()
				if err == nil && !bytes.Equal(got, want) {
					err = fmt.Errorf("answer %.40q, want %.40q", got, want)
				}
				errs <- err
			}()
		}
		wg.Wait()
		wall += time.Since(start)
		cpu += n.cpuTicks() - cpu0
		peak = max(peak, stop())
		runs++
		close(errs)
		for err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	listings := float64(runs * concurrent)
	b.ReportMetric(wall.Seconds()/float64(runs), "listing-s")
	b.ReportMetric(float64(peak-idle)/1024/float64(concurrent), "rss-growth-MiB/listing")
	b.ReportMetric(float64(peak)/1024, "rss-peak-MiB")
	b.ReportMetric(float64(cpu)/100/listings, "daemon-cpu-s/listing")
}

// lastBytes keeps the last 16 bytes written to it (the end of the array).
type lastBytes struct{ b *bytes.Buffer }

func (l lastBytes) Write(p []byte) (int, error) {
	l.b.Write(p)
	if l.b.Len() > 16 {
		rest := l.b.Bytes()[l.b.Len()-16:]
		l.b.Reset()
		l.b.Write(rest)
	}
	return len(p), nil
}
