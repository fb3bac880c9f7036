package e2e

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/testutil/wait"
)

// assertAnswersEveryFace is the hostile-user tests' check that an attack
// did not take the node down: the daemon process is alive, the node API
// answers, the file manager lists server's root, the SFTP listener greets a
// new connection with its SSH banner, and a websocket for server
// authenticates. Each face gets a fresh connection, so a face starved of
// descriptors or goroutines shows up here even if an old connection still
// works. The attacks run first; this runs after them (and, in the
// all-at-once test, while they are still running).
func (n *node) assertAnswersEveryFace(t *testing.T, server string) {
	t.Helper()
	select {
	case <-n.exited:
		t.Fatalf("the daemon died: %v\n%s", n.exitErr, n.log)
	default:
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) int {
		req, _ := http.NewRequest("GET", n.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+n.Token)
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s after the attack: %v\n%s", path, err, n.log)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := get("/api/system"); code != http.StatusOK {
		t.Fatalf("GET /api/system after the attack: %d", code)
	}
	if code := get("/api/servers/" + server + "/files/list-directory?directory=%2F"); code != http.StatusOK {
		t.Fatalf("list-directory after the attack: %d", code)
	}

	// The listener comes up at boot next to the API: a refusal in the first
	// seconds of a node's life is not the attack's doing, so it is retried.
	var conn net.Conn
	var err error
	wait.Until(5*time.Second, func() bool {
		conn, err = net.DialTimeout("tcp", n.sftpAddr(), 5*time.Second)
		return err == nil || !errors.Is(err, syscall.ECONNREFUSED)
	})
	if err != nil {
		t.Fatalf("SFTP listener after the attack: %v", err)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	banner, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if err != nil || !strings.HasPrefix(banner, "SSH-2.0-") {
		t.Fatalf("SFTP listener after the attack: banner %q, %v", banner, err)
	}

	waitNextSecond() // a token from the daemon's boot second is refused
	w := n.mustDial(t, server)
	w.send("auth", n.sign(t, wsClaims(server, "00000000-0000-4000-8000-0000000000aa", "*")))
	if m, _ := w.next(10 * time.Second); m.Event != "auth success" {
		t.Fatalf("websocket after the attack: first frame %+v, want auth success", m)
	}
	_ = w.c.CloseNow()
}

// The survival check passes on a node nobody attacked (each attack test
// also has its own control that shows the attack ran).
func TestSurvivalCheckOnAHealthyNode(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	n.assertAnswersEveryFace(t, filesServer)
}
