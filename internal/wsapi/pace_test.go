package wsapi

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// slowConsoleClient floods the console of a hub with opts while one client
// with a large receive buffer reads slowly, and returns the most bytes the
// client's kernel held unread at any frame it read (SIOCINQ: delivered to
// the client, not read by it yet), the frames it read, and the pings it
// answered.
func slowConsoleClient(t *testing.T, opts Options, frames int) (maxUnread int, read int, pings int64) {
	t.Helper()
	_, srv, url, stop := setup(t, opts)
	defer stop()

	var tcp atomic.Pointer[net.TCPConn]
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			// As large as the kernel allows: the buffer that hides a backlog.
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			tcp.Store(tc)
		}
		return c, err
	}}}
	var answered atomic.Int64
	conn, _, err := websocket.Dial(context.Background(), url, &websocket.DialOptions{
		HTTPClient:     client,
		OnPingReceived: func(context.Context, []byte) bool { answered.Add(1); return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(-1)
	send(t, conn, "auth", token(t, "*"))
	readUntil(t, conn, EventAuthSuccess)
	wait.For(t, 10*time.Second, func() bool { return srv.bus.Subscribers() == 1 }, "the client subscribed")

	stopFlood := make(chan struct{})
	var flood sync.WaitGroup
	flood.Add(1)
	go func() {
		defer flood.Done()
		line := strings.Repeat("x", 80)
		batch := make([]events.Event, 64)
		for n := 0; ; n += len(batch) {
			select {
			case <-stopFlood:
				return
			default:
			}
			for i := range batch {
				batch[i] = events.New(events.ConsoleOutput, fmt.Sprintf("%s %d", line, n+i))
			}
			srv.bus.PublishAll(batch)
		}
	}()
	defer func() {
		close(stopFlood)
		flood.Wait()
	}()

	unread := func() int {
		sc, err := tcp.Load().SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		_ = sc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		return n
	}
	for read = 0; read < frames; read++ {
		if _, _, err := conn.Read(context.Background()); err != nil {
			t.Fatalf("after %d frames: %v", read, err)
		}
		maxUnread = max(maxUnread, unread())
		time.Sleep(200 * time.Microsecond) // the slow reader: the point of the test
	}
	return maxUnread, read, answered.Load()
}

// TestConsolePacingBoundsUnreadConsole: a client that reads slower than the
// console prints holds at most the pacing's window (and one slice of
// frames) unread in its kernel buffer, however large that buffer is; the
// control without pacing shows the backlog that the pacing removes.
func TestConsolePacingBoundsUnreadConsole(t *testing.T) {
	defer goleak.VerifyNone(t)
	const window = 32 << 10
	// One slice of the test's frames (~130 bytes each) on top of the window.
	const bound = window + writeSlice*160
	paced, read, pings := slowConsoleClient(t, Options{paceWindow: window}, 2000)
	t.Logf("paced: at most %d bytes unread over %d frames, %d pings answered", paced, read, pings)
	if pings == 0 {
		t.Fatal("the daemon sent no ping")
	}
	if paced > bound {
		t.Fatalf("paced: %d bytes unread at the client, over the bound of %d", paced, bound)
	}
	unpaced, read, pings := slowConsoleClient(t, Options{PaceBudget: -1}, 2000)
	t.Logf("control without pacing: at most %d bytes unread over %d frames, %d pings", unpaced, read, pings)
	if pings != 0 {
		t.Fatalf("control: %d pings without pacing", pings)
	}
	if unpaced <= bound {
		t.Fatalf("control: only %d bytes unread without pacing: the test shows nothing", unpaced)
	}
}

// roundTrips drives a pacer through rounds of one ping each (written
// bytes: the window, the client always behind by inflight) with the given
// round trip per round, and returns the window after them.
func roundTrips(p *pacer, rtt func(round int) time.Duration, rounds int) uint64 {
	now := time.Unix(0, 0).Add(time.Duration(p.nextID) * time.Hour) // after the rounds before
	written := p.lastPing
	for i := 0; i < rounds; i++ {
		written += p.window // the writer fills the window
		f, ok := p.due(written, now)
		if !ok {
			panic("no ping due")
		}
		now = now.Add(rtt(i))
		p.pong(f[2:], now)
	}
	return p.window
}

// TestPacerWindow: the window's rule, on synthetic round trips. A distant
// panel whose round trip is steady (150 ms, 400 ms: more than the budget)
// keeps growing its window, since only the delay beyond the smallest round
// trip counts; a client whose pings queue up past the budget gets a window
// in proportion, down to the floor; a fast one grows to the ceiling.
func TestPacerWindow(t *testing.T) {
	const budget = 250 * time.Millisecond
	for _, rtt := range []time.Duration{time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond} {
		p := newPacer(budget, 0)
		if w := roundTrips(p, func(int) time.Duration { return rtt }, 20); w != paceWindowMax {
			t.Errorf("steady round trip %s: window %d, want the ceiling %d", rtt, w, paceWindowMax)
		}
	}
	// A client that takes a second per window beyond a 1 ms round trip:
	// the window shrinks to about a quarter each round, to the floor.
	p := newPacer(budget, 0)
	w := roundTrips(p, func(i int) time.Duration {
		if i == 0 {
			return time.Millisecond
		}
		return time.Second + time.Millisecond
	}, 20)
	if w != paceWindowMin {
		t.Errorf("slow client: window %d, want the floor %d", w, paceWindowMin)
	}
	// One late round: the window is cut in proportion once, not per pong.
	p = newPacer(budget, 0)
	roundTrips(p, func(i int) time.Duration { return time.Millisecond }, 1)
	before := p.window
	roundTrips(p, func(i int) time.Duration { return 500*time.Millisecond + time.Millisecond }, 1)
	if got, want := p.window, before/2; got < want*9/10 || got > want*11/10 {
		t.Errorf("a round at twice the budget: window %d, want about %d", got, want)
	}
}
