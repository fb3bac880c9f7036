package wsapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/tokens"
)

// TestCloseJTIsClosesDeniedSocketsOnly: after a jti denial, the socket
// carrying it is closed with 4401 and the same token is refused on a new
// socket with the text the panel recovers from; a socket of another jti
// stays open.
func TestCloseJTIsClosesDeniedSocketsOnly(t *testing.T) {
	defer goleak.VerifyNone(t)
	func() {
		h, _, url, stop := setup(t, Options{})
		defer stop()
		denied, other := dial(t, url), dial(t, url)
		defer denied.CloseNow()
		defer other.CloseNow()
		tok := token(t, "*") // jti "j"
		send(t, denied, "auth", tok)
		readUntil(t, denied, EventAuthSuccess)
		send(t, other, "auth", tokenJTI(t, "k"))
		readUntil(t, other, EventAuthSuccess)

		at := time.Now()
		h.opts.Denylist.DenyJTIs([]string{"j"}, at)
		if n := h.CloseJTIs([]string{"j"}, at); n != 1 {
			t.Fatalf("CloseJTIs closed %d sockets, want 1", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for {
			if _, _, err := denied.Read(ctx); err != nil {
				if got := websocket.CloseStatus(err); got != server.CloseRevoked {
					t.Fatalf("denied socket ended with %v (%d), want %d", err, got, server.CloseRevoked)
				}
				break
			}
		}
		send(t, other, "send logs")
		readUntil(t, other, "console output")

		again := dial(t, url)
		defer again.CloseNow()
		send(t, again, "auth", tok)
		m := readUntil(t, again, EventJWTError)
		if len(m.Args) != 1 || !strings.HasPrefix(m.Args[0], jwtDeniedText) {
			t.Fatalf("the denied token on a new socket: %q, want the denylist text", m.Args)
		}
	}()
}

func tokenJTI(t *testing.T, jti string) string {
	t.Helper()
	tok, err := signClaims(map[string]any{
		"user_uuid": "u2", "server_uuid": testServer, "permissions": []any{"*"}, "jti": jti,
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func signClaims(c map[string]any) (string, error) { return tokens.Sign([]byte(testKey), c) }
