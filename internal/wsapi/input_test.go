package wsapi

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/tokens"
)

// clientFrame is a masked text frame, as a client sends it.
func clientFrame(payload []byte) []byte {
	f := []byte{0x81}
	switch n := len(payload); {
	case n < 126:
		f = append(f, 0x80|byte(n))
	default:
		f = append(f, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	}
	mask := [4]byte{0x1b, 0x2c, 0x3d, 0x4e}
	f = append(f, mask[:]...)
	for i, b := range payload {
		f = append(f, b^mask[i%4])
	}
	return f
}

// readServerFrame reads one unmasked frame of the server.
func readServerFrame(t *testing.T, r *bufio.Reader) (opcode byte, payload []byte) {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		t.Fatal(err)
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		_, _ = io.ReadFull(r, b[:])
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		_, _ = io.ReadFull(r, b[:])
		n = binary.BigEndian.Uint64(b[:])
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		t.Fatal(err)
	}
	return h[0] & 0x0f, payload
}

// TestWebsocketFramesSentWithUpgrade: frames that reach the daemon together
// with the upgrade request, and several frames in one segment, are all
// read and answered in order (the reader waits for input only when none
// is buffered).
func TestWebsocketFramesSentWithUpgrade(t *testing.T) {
	defer goleak.VerifyNone(t)
	_, _, url, stop := setup(t, Options{})
	defer stop()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "ws://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	frame := func(event string, args ...string) []byte {
		b, _ := json.Marshal(message{Event: event, Args: append([]string{}, args...)})
		return clientFrame(b)
	}
	// The upgrade request, auth and one command in one write; then two
	// more messages in another.
	first := "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	out := append([]byte(first), frame("auth", token(t, "*"))...)
	out = append(out, frame("send stats")...)
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	var got []string
	want := []string{EventAuthSuccess, "status", "stats", "console output", "console output", "stats"}
	sentSecond := false
	for len(got) < len(want) {
		op, payload := readServerFrame(t, r)
		if op != 1 {
			t.Fatalf("frame with opcode %d: %q", op, payload)
		}
		var m message
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Event)
		if len(got) == 3 && !sentSecond {
			sentSecond = true
			second := append(frame("send logs"), frame("send stats")...)
			if _, err := conn.Write(second); err != nil {
				t.Fatal(err)
			}
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// TestWebsocketOverTLS: over TLS (no descriptor to peek at) the reader
// reads and answers messages too, and the session ends cleanly.
func TestWebsocketOverTLS(t *testing.T) {
	defer goleak.VerifyNone(t)
	opts := Options{
		Verifier: tokens.NewVerifier(func() []byte { return []byte(testKey) }, nil),
		Denylist: tokens.NewDenylist(time.Now().Add(-time.Hour)),
	}
	h := NewHub(opts)
	srv := &fakeServer{bus: events.NewBus()}
	hs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sock, err := Accept(w, r, nil)
		if err != nil {
			return
		}
		h.Serve(r.Context(), sock, srv, "192.0.2.1")
	}))
	defer hs.Close()
	defer h.Close()
	c, _, err := websocket.Dial(context.Background(), "wss"+strings.TrimPrefix(hs.URL, "https"),
		&websocket.DialOptions{HTTPClient: hs.Client()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	send(t, c, "auth", token(t, "*"))
	readUntil(t, c, EventAuthSuccess)
	send(t, c, "send stats")
	readUntil(t, c, events.Stats)
	send(t, c, "send logs")
	readUntil(t, c, events.ConsoleOutput)
	_ = c.Close(websocket.StatusNormalClosure, "")
}
