package e2e

import (
	"context"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/google/uuid"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/devimage"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
)

// floodImage is the game server image of BenchmarkConsoleFloodDelay, built
// from this tree under a tag of its own (its floodts command is new; the
// shared tag may hold another tree's build while other tests run).
const floodImage = "wharf-test/gameserver:floodts"

// floodClient is what one benchmark client saw.
type floodClient struct {
	delays  []time.Duration // per timestamped line: arrival minus the game's timestamp
	lines   int
	markers int
	doneLag time.Duration // the "floodts done" line's delay; -1 when it never came
	err     error         // the read error that ended the client, if any
}

// BenchmarkConsoleFloodDelay (issue 38 §1): 30 clients watch one server
// whose game prints timestamped lines as fast as it can (floodts) for 20 s.
// Each client computes every line's delay from the timestamp the game
// printed to the moment it read the line (the game and the clients share
// the host's clock). Reports the median and p99 delay over all clients'
// lines, the worst delay of the flood's last line ("floodts done") over the
// clients (the newest line), the lines per second the game printed (from
// its sequence numbers) and each client received, the skipped-lines markers
// per client, and the daemon's CPU. WHARF_BENCH_NICE runs the daemon under
// nice (see benchNice).
func BenchmarkConsoleFloodDelay(b *testing.B) {
	testimages.RequireDocker(b)
	if err := devimage.GameServer(context.Background(), testimages.Client(b), floodImage); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_, _ = testimages.Client(b).ImageRemove(context.Background(), floodImage, client.ImageRemoveOptions{Force: true})
	})
	id := uuid.NewString() // fresh: other sessions run the same benchmarks on this engine
	s := gameServer(id)
	s.Settings["container"] = map[string]any{"image": "~" + floodImage}
	n := startNode(b, nodeOptions{servers: []devpanel.Server{s}, wrap: benchNice()})
	b.Cleanup(func() { n.request("DELETE", "/api/servers/"+id, nil, "") })
	n.request("POST", "/api/servers/"+id+"/power", map[string]any{"action": "start"}, "")
	n.waitState(id, "running", 60*time.Second)
	waitNextSecond()
	const clients, secs = 30, 20
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := make([]floodClient, clients)
	var wg sync.WaitGroup
	var lastSeq sync.Map // client → the highest sequence number seen
	for i := range clients {
		w := dialFloodClient(b, n, id)
		r := &results[i]
		r.doneLag = -1
		wg.Go(func() {
			defer w.c.CloseNow()
			for {
				_, data, err := w.c.Read(ctx)
				if err != nil {
					r.err = err
					return
				}
				now := time.Now()
				line, ok := consoleArg(data)
				if !ok {
					continue
				}
				switch {
				case strings.HasPrefix(line, "ts "):
					f := strings.Fields(line)
					if len(f) != 3 {
						continue
					}
					ns, _ := strconv.ParseInt(f[1], 10, 64)
					seq, _ := strconv.Atoi(f[2])
					r.delays = append(r.delays, now.Sub(time.Unix(0, ns)))
					r.lines++
					lastSeq.Store(i, seq)
				case strings.HasPrefix(line, "floodts done "):
					ns, _ := strconv.ParseInt(strings.TrimPrefix(line, "floodts done "), 10, 64)
					r.doneLag = now.Sub(time.Unix(0, ns))
					return
				case strings.Contains(line, "lines skipped"):
					r.markers++
				}
			}
		})
	}
	pid := n.cmd.Process.Pid
	cpu0, t0 := procCPU(b, pid), time.Now()
	n.request("POST", "/api/servers/"+id+"/commands", map[string]any{"commands": []string{"floodts " + strconv.Itoa(secs)}}, "")
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(secs*time.Second + 60*time.Second):
		cancel() // a client that never got the done line: reported as such
		<-done
	}
	el := time.Since(t0)
	cpu := procCPU(b, pid) - cpu0
	var all []time.Duration
	var worstDone time.Duration
	lines, markers, missing := 0, 0, 0
	for _, r := range results {
		all = append(all, r.delays...)
		lines += r.lines
		markers += r.markers
		if r.doneLag < 0 {
			missing++
			b.Logf("a client without the last line: %d lines, %d markers, ended by %v", r.lines, r.markers, r.err)
		}
		worstDone = max(worstDone, r.doneLag)
	}
	printed := 0
	lastSeq.Range(func(_, v any) bool { printed = max(printed, v.(int)); return true })
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(p*float64(len(all))))].Seconds() * 1000
	}
	b.ReportMetric(pct(0.5), "median-delay-ms")
	b.ReportMetric(pct(0.99), "p99-delay-ms")
	b.ReportMetric(worstDone.Seconds()*1000, "last-line-worst-delay-ms")
	b.ReportMetric(float64(missing), "clients-without-last-line")
	b.ReportMetric(float64(printed)/secs, "game-lines/s")
	b.ReportMetric(float64(lines)/clients/secs, "lines/s/client")
	b.ReportMetric(float64(markers)/clients, "markers/client")
	b.ReportMetric(100*cpu.Seconds()/el.Seconds(), "daemon-cpu-%")
}

// dialFloodClient opens and authenticates one benchmark client. With
// WHARF_BENCH_CLIENT_RCVBUF (bytes), its socket's kernel receive buffer is
// fixed at that size: a client process starved of CPU on a busy machine
// otherwise lets Linux grow it to megabytes, and the lines waiting there
// (delivered, as far as the daemon can see) are the delay it measures.
func dialFloodClient(b *testing.B, n *node, id string) *wsClient {
	rcv, _ := strconv.Atoi(os.Getenv("WHARF_BENCH_CLIENT_RCVBUF"))
	if rcv <= 0 {
		return n.dialAuthed(b, id, n.sign(b, wsClaims(id, wsUser1, "*")))
	}
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		_ = c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcv) })
		return err
	}}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, n.wsURL(id), &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		b.Fatal(err)
	}
	c.SetReadLimit(-1)
	b.Cleanup(func() { _ = c.CloseNow() })
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"event":"auth","args":["`+n.sign(b, wsClaims(id, wsUser1, "*"))+`"]}`)); err != nil {
		b.Fatal(err)
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if strings.Contains(string(data), `"auth success"`) {
			return &wsClient{t: b, c: c}
		}
	}
}

// consoleArg returns the argument of a console output frame.
func consoleArg(data []byte) (string, bool) {
	const prefix = `{"event":"console output","args":["`
	s := strings.TrimRight(string(data), "\n") // Wings' frames end with a newline
	if !strings.HasPrefix(s, prefix) || !strings.HasSuffix(s, `"]}`) {
		return "", false
	}
	return s[len(prefix) : len(s)-3], true
}
