package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// The session gauges are read from their owners at scrape time: with two
// SFTP sessions and three websockets open (their HTTP requests long
// returned), a scrape shows 2 and 3; once they are closed, 0 and 0.
func TestMetricsSessionGaugesAreLive(t *testing.T) {
	t.Parallel()
	const tok = "e2e-scrape-token-0123456789"
	port := freePort(t)
	n := dosNode(t, func(c *config.Config) {
		c.Metrics = config.Metrics{BindAddress: fmt.Sprintf("127.0.0.1:%d", port), Token: tok}
	})
	scrape := func() (sftpN, wsN string) {
		return scrapeGauge(port, tok, "wharf_sftp_sessions"), scrapeGauge(port, tok, "wharf_websocket_sessions")
	}
	want := func(what, sftpWant, wsWant string) {
		t.Helper()
		var s, w string
		if wait.Until(10*time.Second, func() bool { s, w = scrape(); return s == sftpWant && w == wsWant }) {
			return
		}
		t.Fatalf("%s: wharf_sftp_sessions %s, wharf_websocket_sessions %s; want %s and %s", what, s, w, sftpWant, wsWant)
	}
	want("nothing open", "0", "0")

	sessions := []*sftpSession{
		n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass)),
		n.sftpOpen(t, sftpLogin("alice", sftpSrvB), ssh.Password(sftpPass)),
	}
	waitNextSecond() // a token from the daemon's boot second is refused
	var sockets []*wsClient
	for range 3 {
		w := n.mustDial(t, sftpSrvA)
		w.send("auth", n.sign(t, wsClaims(sftpSrvA, sftpOwner, "*")))
		if m, _ := w.next(10 * time.Second); m.Event != "auth success" {
			t.Fatalf("websocket: first frame %+v, want auth success", m)
		}
		sockets = append(sockets, w)
	}
	// The first scrape after they are open must already see them all.
	if s, w := scrape(); s != "2" || w != "3" {
		t.Fatalf("with 2 SFTP sessions and 3 websockets open: wharf_sftp_sessions %s, wharf_websocket_sessions %s", s, w)
	}

	for _, s := range sessions {
		s.close()
	}
	for _, w := range sockets {
		_ = w.c.CloseNow()
	}
	want("all closed", "0", "0")
}

// scrapeGauge reads one metric of the node's Prometheus endpoint: its
// value, "missing" when the scrape lacks it, "" when the scrape failed.
func scrapeGauge(port int, tok, name string) string {
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return "missing"
	}
	return string(m[1])
}
