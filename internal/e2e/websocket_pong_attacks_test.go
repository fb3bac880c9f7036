package e2e

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/devpanel"
)

// rawWS opens a websocket to the server's console by hand, so that the
// test can send frames no websocket library would.
func rawWS(t *testing.T, n *node, server string) (net.Conn, *bufio.Reader) {
	t.Helper()
	host := strings.TrimPrefix(n.URL, "http://")
	c, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	req := "GET /api/servers/" + server + "/ws HTTP/1.1\r\nHost: " + host + "\r\n" +
		"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	res, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", res.Status)
	}
	return c, r
}

// rawFrame is one client frame: b0 (FIN, RSV, opcode), masked or not, with
// the payload length written as declared (which may differ from payload's).
func rawFrame(b0 byte, masked bool, declared uint64, payload []byte) []byte {
	f := []byte{b0, 0}
	if masked {
		f[1] = 0x80
	}
	switch {
	case declared <= 125:
		f[1] |= byte(declared)
	case declared <= 0xffff:
		f[1] |= 126
		f = binary.BigEndian.AppendUint16(f, uint16(declared))
	default:
		f[1] |= 127
		f = binary.BigEndian.AppendUint64(f, declared)
	}
	key := [4]byte{0x11, 0x22, 0x33, 0x44}
	if masked {
		f = append(f, key[:]...)
	}
	for i, b := range payload {
		if masked {
			b ^= key[i%4]
		}
		f = append(f, b)
	}
	return f
}

// rawEvent reads the server's frames until a text frame with the event;
// false when the connection ends first.
func rawEvent(t *testing.T, c net.Conn, r *bufio.Reader, event string) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a backstop against a hang
	for {
		var h [2]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return false
		}
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return false
			}
			n = uint64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return false
			}
			n = binary.BigEndian.Uint64(b[:])
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			return false
		}
		switch h[0] & 0x0f {
		case 0x8: // close
			return false
		case 0x1:
			var m struct{ Event string }
			if json.Unmarshal(p, &m) == nil && m.Event == event {
				return true
			}
		}
	}
}

// rawClosed reports whether the daemon ends the connection (a close frame
// or the end of the stream) before the backstop.
func rawClosed(t *testing.T, c net.Conn, r *bufio.Reader) bool {
	t.Helper()
	if rawEvent(t, c, r, "never sent") {
		return false
	}
	var ne net.Error
	_, err := r.ReadByte()
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestWebsocketPongAttacks: the pongs that the console's pacing reads below
// the websocket library (issue 38 §1). Pongs that answer no ping are
// ignored and the socket works on; a pong that is not a valid control frame
// (unmasked, fragmented, reserved bits, a length over 125, up to 2^62)
// closes that socket only, as the library closes on any invalid frame.
func TestWebsocketPongAttacks(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{gameServer(wsServerA)}})
	waitNextSecond()
	tok := n.sign(t, wsClaims(wsServerA, wsUser1, "*"))
	auth, _ := json.Marshal(map[string]any{"event": "auth", "args": []string{tok}})

	// Control: a hundred unsolicited pongs, cut anywhere, then a message:
	// the socket answers.
	c, r := rawWS(t, n, wsServerA)
	var stream []byte
	for i := 0; i < 100; i++ {
		stream = append(stream, rawFrame(0x8a, true, uint64(i%126), make([]byte, i%126))...)
	}
	stream = append(stream, rawFrame(0x81, true, uint64(len(auth)), auth)...)
	for len(stream) > 0 { // written in pieces of 7 bytes: frames cut anywhere
		k := min(7, len(stream))
		if _, err := c.Write(stream[:k]); err != nil {
			t.Fatal(err)
		}
		stream = stream[k:]
	}
	if !rawEvent(t, c, r, "auth success") {
		t.Fatal("no auth success after unsolicited pongs")
	}

	for name, frame := range map[string][]byte{
		"unmasked pong":   rawFrame(0x8a, false, 8, make([]byte, 8)),
		"fragmented pong": rawFrame(0x0a, true, 8, make([]byte, 8)),
		"pong with rsv":   rawFrame(0xca, true, 8, make([]byte, 8)),
		"pong of 126":     rawFrame(0x8a, true, 126, make([]byte, 126)),
		"pong of 2^62":    rawFrame(0x8a, true, 1<<62, make([]byte, 64)),
	} {
		c, r := rawWS(t, n, wsServerA)
		if _, err := c.Write(rawFrame(0x81, true, uint64(len(auth)), auth)); err != nil {
			t.Fatal(err)
		}
		if !rawEvent(t, c, r, "auth success") {
			t.Fatalf("%s: no auth success", name)
		}
		if _, err := c.Write(frame); err != nil {
			t.Fatal(err)
		}
		if !rawClosed(t, c, r) {
			t.Fatalf("%s: the socket stayed open", name)
		}
	}

	// The first socket still works, and a new one too.
	send := rawFrame(0x81, true, uint64(len(`{"event":"send stats","args":[]}`)), []byte(`{"event":"send stats","args":[]}`))
	if _, err := c.Write(send); err != nil {
		t.Fatal(err)
	}
	if !rawEvent(t, c, r, "stats") {
		t.Fatal("the first socket stopped answering")
	}
	w := n.mustDial(t, wsServerA)
	w.auth(tok)
}
