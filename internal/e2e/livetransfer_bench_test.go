package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/bench"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/tree"
	"github.com/wharf/wharf/internal/testutil/wait"
	"github.com/wharf/wharf/internal/tokens"
)

// BenchmarkLiveTransferDowntime moves the game-server tree (1 GiB;
// WHARF_BENCH_TREE_MB changes it) from a running server that rewrites
// about 2 % of its files per minute, once live and once classic, side by
// side in one run (alternating which goes first). The classic transfer is
// forced by a proxy in front of the same target that answers 404 to the
// live question. It reports, for each, the time the server is offline
// (live: from the stop to the end, as the source logs it; classic: from
// the request, which stops the server at once, to the target's success)
// and the total transfer time. WHARF_BENCH_ONLY=live (or classic) runs
// one side only, to profile it.
func BenchmarkLiveTransferDowntime(b *testing.B) {
	treeMB := int64(1024)
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
		treeMB = int64(v)
	}
	testimages.RequireDocker(b)
	testimages.GameServer(context.Background(), b)
	b.StopTimer() // timed: the transfers only
	var liveOff, liveTotal, classicOff, classicTotal float64
	for i := 0; i < b.N; i++ {
		for k := range 2 {
			live := (i+k)%2 == 0
			if only := os.Getenv("WHARF_BENCH_ONLY"); only != "" && only != map[bool]string{true: "live", false: "classic"}[live] {
				continue // profiling one side (the speedup is then meaningless)
			}
			off, total := liveBenchRun(b, live, treeMB, i)
			if live {
				liveOff += off
				liveTotal += total
			} else {
				classicOff += off
				classicTotal += total
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(liveOff/n, "live-offline-s")
	b.ReportMetric(classicOff/n, "classic-offline-s")
	b.ReportMetric(liveTotal/n, "live-total-s")
	b.ReportMetric(classicTotal/n, "classic-total-s")
	b.ReportMetric(classicTotal/liveTotal, "speedup")
}

func liveBenchRun(b *testing.B, live bool, treeMB int64, run int) (offline, total float64) {
	b.Helper()
	id := "7b0000b1-0000-4000-8000-0000000000b1"
	if !live {
		id = "7b0000b1-0000-4000-8000-0000000000b2"
	}
	removeContainer := func() {
		_, _ = testimages.Client(b).ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
	}
	removeContainer() // the target's, from the previous iteration
	b.Cleanup(removeContainer)
	// Room for the tree on both nodes (this VM backs memory lazily).
	bench.WarmMemory(b, int(treeMB)<<20*4)
	p := devpanel.New(clusterTokenID, clusterToken)
	p.PutServer(gameServer(id))
	ps := httptest.NewServer(p.Handler())
	defer ps.Close()
	srcA, tgtA := &assignment{ids: map[string]bool{id: true}}, &assignment{ids: map[string]bool{}}
	on := func(_ string, c *config.Config) {
		c.System.Transfers.Live = true
		if v := os.Getenv("WHARF_BENCH_COMPRESSION"); v != "" {
			c.System.Transfers.Compression = v // pin it (default: auto)
		}
	}
	src, srcURL, srcData, srcLog := liveBenchNode(b, "source", panelView(b, ps.URL, "source", srcA).URL, on)
	_, tgtURL, tgtData, tgtLog := liveBenchNode(b, "target", panelView(b, ps.URL, "target", tgtA).URL, on)
	dir := filepath.Join(srcData, id)
	if _, err := tree.GameServer(dir, treeMB<<20); err != nil {
		b.Fatal(err)
	}
	var files []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && filepath.Ext(p) != ".jar" {
			files = append(files, p)
		}
		return nil
	})
	api := func(method, path string, body any) {
		data, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, srcURL+path, bytes.NewReader(data))
		req.Header.Set("Authorization", "Bearer "+clusterToken)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 202 {
			b.Fatalf("%s %s: %v %v", method, path, err, res)
		}
		res.Body.Close()
	}
	api("POST", "/api/servers/"+id+"/power", map[string]string{"action": "start"})
	// Running: the start (which first walks the tree to fix its
	// ownership) is over and takes no CPU from the transfer.
	if !wait.Until(2*time.Minute, func() bool {
		req, _ := http.NewRequest("GET", srcURL+"/api/servers/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+clusterToken)
		var st struct {
			State string `json:"state"`
		}
		if res, err := http.DefaultClient.Do(req); err == nil {
			_ = json.NewDecoder(res.Body).Decode(&st)
			res.Body.Close()
		}
		return st.State == "running"
	}) {
		b.Fatalf("the server did not start\n%s", srcLog.String())
	}
	time.Sleep(time.Second) // the game's own start

	// The game: about 2 % of the (non-jar) files rewritten per minute.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(uint64(run), 7))
		perTick := max(1, len(files)*2/100/600) // ticks of 100 ms
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				for range perTick {
					f, err := os.OpenFile(files[rng.IntN(len(files))], os.O_WRONLY|os.O_APPEND, 0)
					if err == nil {
						_, _ = f.WriteString("tick\n")
						_ = f.Close()
					}
				}
			}
		}
	})
	target := tgtURL
	if !live {
		target = noLiveProxy(b, tgtURL)
	}
	jwt, _ := tokens.Sign([]byte(clusterToken), map[string]any{"sub": id, "exp": time.Now().Add(time.Hour).Unix()})
	syscall.Sync()
	b.StartTimer()
	start := time.Now()
	api("POST", "/api/servers/"+id+"/transfer", map[string]string{"url": target + "/api/transfers", "token": "Bearer " + jwt})
	// The writer stops with the server (a stopped game writes nothing);
	// the classic transfer's offline time starts once the server is down,
	// when the source starts streaming, as the live one's does.
	stopping := regexp.MustCompile(`Preparing to stream`)
	if live {
		stopping = regexp.MustCompile(`Stopping the server to send the last changes`)
	}
	down := make(chan time.Time, 1)
	wg.Go(func() {
		for !stopping.MatchString(srcLog.String()) {
			// Polls the log for the moment the server stops: the figure
			// is read from these instants (10 ms resolution).
			time.Sleep(10 * time.Millisecond)
		}
		close(stop)
		for !live && !strings.Contains(srcLog.String(), "Streaming archive to destination...") {
			// As above: the instant is the figure's.
			time.Sleep(10 * time.Millisecond)
		}
		down <- time.Now()
	})
	if _, ok := p.WaitForCall("POST", "/servers/"+id+"/transfer/success", 20*time.Minute); !ok {
		b.Fatalf("no success reported\n%s", srcLog.String())
	}
	end := time.Now()
	total = end.Sub(start).Seconds()
	b.StopTimer()
	wg.Wait()
	offline = end.Sub(<-down).Seconds()
	if live {
		m := regexp.MustCompile(`offline_ms=(\d+)`)
		var s []string
		if !wait.Until(30*time.Second, func() bool { s = m.FindStringSubmatch(srcLog.String()); return s != nil }) {
			b.Fatalf("no offline time logged\n%s", srcLog.String())
		}
		ms, _ := strconv.Atoi(s[1])
		offline = float64(ms) / 1000
	}
	b.Logf("run %d live=%v: offline %.2f s, total %.1f s", run, live, offline, total)
	if os.Getenv("WHARF_BENCH_VERBOSE") != "" {
		for _, l := range strings.Split(srcLog.String()+tgtLog.String(), "\n") {
			if !strings.Contains(l, "http request") {
				b.Log(l)
			}
		}
	}
	_ = src
	_ = os.RemoveAll(dir)
	_ = os.RemoveAll(filepath.Join(tgtData, id))
	return offline, total
}

// noLiveProxy forwards to target but answers 404 to the live question, as
// a Wings target would.
func noLiveProxy(b *testing.B, target string) string {
	up, _ := url.Parse(target)
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(up) }, FlushInterval: -1}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			http.NotFound(w, r)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	b.Cleanup(s.Close)
	return s.URL
}

func liveBenchNode(b *testing.B, name, remote string, mutate func(string, *config.Config)) (*exec.Cmd, string, string, *syncBuffer) {
	b.Helper()
	c, cfgPath := clusterConfig(b, name, remote, mutate)
	cmd := exec.Command(wharfBinary, "--config", cfgPath)
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	u := "http://127.0.0.1:" + strconv.Itoa(c.API.Port)
	if !wait.Until(30*time.Second, func() bool {
		res, err := http.Get(u + "/api/system")
		if err == nil {
			res.Body.Close()
		}
		return err == nil
	}) {
		b.Fatalf("%s did not start\n%s", name, log.String())
	}
	return cmd, u, c.System.Data, log
}
