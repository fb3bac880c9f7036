package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
)

// procCPU returns the user+system CPU time of a process.
func procCPU(tb testing.TB, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // CLK_TCK = 100
}

// procRSS returns the resident set size of a process in bytes.
func procRSS(tb testing.TB, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}

func benchServerID(i int) string { return fmt.Sprintf("5e000000-0000-4000-8000-%012d", i) }

// BenchmarkWebsocketFanout: 50 authenticated clients watch flooding
// servers. A server takes at most 30 sockets, so the clients are split over
// two servers (25 each), both flooding. Reports console lines received per
// second per client and the daemon's CPU use.
func BenchmarkWebsocketFanout(b *testing.B) {
	testimages.RequireDocker(b)
	testimages.GameServer(context.Background(), b)
	ids := []string{benchServerID(1), benchServerID(2)}
	// WHARF_BENCH_FIREWALL=off runs the node without Wharf's firewall, to
	// set the console's figures with the rules beside those without.
	n := startNode(b, nodeOptions{servers: []devpanel.Server{gameServer(ids[0]), gameServer(ids[1])}, mutate: func(c *config.Config) {
		c.Docker.Network.Firewall = os.Getenv("WHARF_BENCH_FIREWALL") != "off"
	}})
	for _, id := range ids {
		b.Cleanup(func() { n.request("DELETE", "/api/servers/"+id, nil, "") })
		n.request("POST", "/api/servers/"+id+"/power", map[string]any{"action": "start"}, "")
	}
	for _, id := range ids {
		n.waitState(id, "running", 60*time.Second)
	}
	waitNextSecond()
	var counts [50]atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 50 {
		id := ids[i%2]
		w := n.dialAuthed(b, id, n.sign(b, wsClaims(id, wsUser1, "*")))
		wg.Go(func() {
			for {
				_, data, err := w.c.Read(ctx)
				if err != nil {
					return
				}
				if strings.Contains(string(data), `"console output"`) {
					counts[i].Add(1)
				}
			}
		})
	}
	const window = 10 * time.Second
	pid := n.cmd.Process.Pid
	cpu0, t0 := procCPU(b, pid), time.Now()
	for time.Since(t0) < window {
		for _, id := range ids {
			n.request("POST", "/api/servers/"+id+"/commands", map[string]any{"commands": []string{"flood 20000"}}, "")
		}
		// Benchmark pacing: one flood per server every 100 ms is the load measured.
		time.Sleep(100 * time.Millisecond)
	}
	el := time.Since(t0)
	cpu := procCPU(b, pid) - cpu0
	var total, minC int64 = 0, 1 << 62
	for i := range counts {
		c := counts[i].Load()
		total += c
		minC = min(minC, c)
	}
	cancel()
	wg.Wait()
	b.ReportMetric(float64(total)/50/el.Seconds(), "lines/s/client")
	b.ReportMetric(float64(minC)/el.Seconds(), "min-lines/s/client")
	b.ReportMetric(100*cpu.Seconds()/el.Seconds(), "daemon-cpu-%")
}

// BenchmarkWebsocketIdleMemory: 500 idle authenticated sockets (over 17
// servers, at most 30 each). Reports the daemon's resident memory per
// socket (RSS growth from before the sockets to after they stayed idle for
// 20 s, divided by 500), and its CPU over those 20 s (next to its CPU over
// 10 s without sockets, the floor of the daemon's own timers).
func BenchmarkWebsocketIdleMemory(b *testing.B) {
	testimages.RequireDocker(b)
	var defs []devpanel.Server
	for i := range 17 {
		defs = append(defs, gameServer(benchServerID(100+i)))
	}
	n := startNode(b, nodeOptions{servers: defs})
	waitNextSecond()
	pid := n.cmd.Process.Pid
	// Warm up the code paths once, then measure.
	w := n.dialAuthed(b, defs[0].UUID, n.sign(b, wsClaims(defs[0].UUID, wsUser1, "*")))
	_ = w.c.Close(websocket.StatusNormalClosure, "")
	// Benchmark: let the warm-up's session end before the idle floor is measured.
	time.Sleep(2 * time.Second)
	const floorWindow, idleWindow = 10 * time.Second, 20 * time.Second
	cpu0, t0 := procCPU(b, pid), time.Now()
	// The measuring window of the idle floor.
	time.Sleep(floorWindow)
	floor := procCPU(b, pid) - cpu0
	floorEl := time.Since(t0)
	rss0 := procRSS(b, pid)
	for i := range 500 {
		id := defs[i%17].UUID
		n.dialAuthed(b, id, n.sign(b, wsClaims(id, wsUser1, "*")))
	}
	// Benchmark: let the sessions' authentication settle before the idle window.
	time.Sleep(2 * time.Second)
	cpu1, t1 := procCPU(b, pid), time.Now()
	// The measuring window of idle sessions.
	time.Sleep(idleWindow)
	idle := procCPU(b, pid) - cpu1
	idleEl := time.Since(t1)
	rss1 := procRSS(b, pid)
	b.ReportMetric(float64(rss1-rss0)/500/1024, "KiB/socket")
	b.ReportMetric(float64(rss1)/(1<<20), "daemon-RSS-MiB")
	b.ReportMetric(100*idle.Seconds()/idleEl.Seconds(), "idle-cpu-%-500-sockets")
	b.ReportMetric(100*floor.Seconds()/floorEl.Seconds(), "idle-cpu-%-no-socket")
}

// BenchmarkWebsocketConsoleDelivery: 30 authenticated clients (a server's
// maximum) watch one server that prints 1,000 console lines per second
// (100 every 100 ms) for 20 s. Reports the daemon's CPU per delivered
// console message (all of the daemon's CPU over the window, reading the
// container's output included, divided by the messages the clients
// received) and its resident memory at the end.
func BenchmarkWebsocketConsoleDelivery(b *testing.B) {
	testimages.RequireDocker(b)
	testimages.GameServer(context.Background(), b)
	id := uuid.NewString() // fresh: other sessions run the same benchmarks on this engine
	n := startNode(b, nodeOptions{servers: []devpanel.Server{gameServer(id)}, wrap: benchNice()})
	b.Cleanup(func() { n.request("DELETE", "/api/servers/"+id, nil, "") })
	n.request("POST", "/api/servers/"+id+"/power", map[string]any{"action": "start"}, "")
	n.waitState(id, "running", 60*time.Second)
	waitNextSecond()
	const clients = 30
	var received atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range clients {
		w := n.dialAuthed(b, id, n.sign(b, wsClaims(id, wsUser1, "*")))
		wg.Go(func() {
			for {
				_, data, err := w.c.Read(ctx)
				if err != nil {
					return
				}
				if strings.Contains(string(data), `"console output"`) {
					received.Add(1)
				}
			}
		})
	}
	// Benchmark: the clients connect and settle before the measured flood.
	time.Sleep(time.Second)
	const window = 20 * time.Second
	pid := n.cmd.Process.Pid
	received.Store(0)
	cpu0, t0 := procCPU(b, pid), time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	sent := 0
	for time.Since(t0) < window {
		n.request("POST", "/api/servers/"+id+"/commands", map[string]any{"commands": []string{"flood 100"}}, "")
		sent++
		<-tick.C
	}
	tick.Stop()
	time.Sleep(500 * time.Millisecond) // the last lines arrive
	cpu := procCPU(b, pid) - cpu0
	got := received.Load()
	rss := procRSS(b, pid)
	cancel()
	wg.Wait()
	want := int64(sent) * 100 * clients
	b.ReportMetric(float64(cpu.Microseconds())/float64(got), "µs-cpu/msg")
	b.ReportMetric(float64(got)/float64(want)*100, "%-delivered")
	b.ReportMetric(float64(rss)/(1<<20), "daemon-RSS-MiB")
}

// benchNice runs the daemon under `nice -n $WHARF_BENCH_NICE` when it is set
// (for example -15): on a machine busy with other work, a daemon that gets
// a core as soon as it is runnable behaves as on a quiet machine (it writes
// each line as soon as it arrives instead of finding a batch queued).
func benchNice() []string {
	if v := os.Getenv("WHARF_BENCH_NICE"); v != "" {
		return []string{"nice", "-n", v}
	}
	return nil
}

// dialAuthed opens and authenticates a socket without a reading goroutine.
func (n *node) dialAuthed(tb testing.TB, server, token string) *wsClient {
	tb.Helper()
	w, _, err := n.dialWS(tb, server, "")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(`{"event":"auth","args":["`+token+`"]}`)); err != nil {
		tb.Fatal(err)
	}
	for {
		_, data, err := w.c.Read(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		if strings.Contains(string(data), `"auth success"`) {
			return w
		}
		if strings.Contains(string(data), `"jwt error"`) {
			tb.Fatalf("auth refused: %s", data)
		}
	}
}
