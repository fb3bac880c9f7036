package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The benchmarks' link model (issue 36, the time figures): with
// WHARF_BENCH_LINK_MBIT=<n> the node-to-node proxy of the transfer
// benchmarks forwards what the source sends at n Mbit/s at most (the
// bucket stays unthrottled): nodes in two sites with the bucket near the
// target, or an S3 that serves parallel ranged GETs faster than one TCP
// stream between the sites. Unset or 0: loopback, no model.

// benchLinks are the link models to run side by side, in Mbit/s (0 for
// none): WHARF_BENCH_LINK_MBIT is one rate or a list ("0,1000,200").
func benchLinks() []int {
	var out []int
	for _, f := range strings.Split(os.Getenv("WHARF_BENCH_LINK_MBIT"), ",") {
		if v, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && v >= 0 {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		out = []int{0}
	}
	return out
}

// linkName names a link model in the figures.
func linkName(mbit int) string {
	if mbit == 0 {
		return "loopback"
	}
	return strconv.Itoa(mbit) + " Mbit/s"
}

// benchLinkProxy is countingProxy with the link model: it counts the
// bytes of the requests' bodies, and paces them to mbit Mbit/s (0: not).
func benchLinkProxy(tb testing.TB, target string, mbit int) (string, *atomic.Int64) {
	tb.Helper()
	if mbit == 0 {
		return countingProxy(tb, target)
	}
	up, _ := url.Parse(target)
	var n atomic.Int64
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(up) }, FlushInterval: -1}
	link := &pacer{rate: float64(mbit) * 1e6 / 8}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = pacedBody{countBody{r.Body, &n}, link}
		rp.ServeHTTP(w, r)
	}))
	tb.Cleanup(srv.Close)
	return srv.URL, &n
}

// pacer is one line: the bytes of every body through it share the rate,
// one after the other. A line left idle gains no more than linkBurst of
// credit, which also absorbs the late wake-ups of a busy machine (a sleep
// that overshoots would otherwise slow the line below its rate).
type pacer struct {
	rate float64 // bytes per second
	mu   sync.Mutex
	free time.Time // when the line has sent everything given so far
}

// linkBurst is the most credit an idle line keeps.
const linkBurst = 50 * time.Millisecond

// wait holds the caller until k more bytes have gone down the line.
func (p *pacer) wait(k int) {
	p.mu.Lock()
	if early := time.Now().Add(-linkBurst); p.free.Before(early) {
		p.free = early
	}
	p.free = p.free.Add(time.Duration(float64(k) / p.rate * float64(time.Second)))
	due := p.free
	p.mu.Unlock()
	if d := time.Until(due); d > 0 {
		time.Sleep(d) // the link model: a slow line is the point of the benchmark
	}
}

type pacedBody struct {
	io.ReadCloser
	p *pacer
}

func (b pacedBody) Read(buf []byte) (int, error) {
	if len(buf) > 256<<10 {
		buf = buf[:256<<10]
	}
	k, err := b.ReadCloser.Read(buf)
	b.p.wait(k)
	return k, err
}
