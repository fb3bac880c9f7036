package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// dosNode runs a node with two servers, A and B, and alice holding every
// permission on both: A is attacked, B is the neighbour that must keep
// working.
func dosNode(t *testing.T, mutate func(c *config.Config)) *node {
	t.Helper()
	n := startSFTPNode(t, mutate, sftpServerDef(sftpSrvA, 0, nil), sftpServerDef(sftpSrvB, 0, nil))
	n.Panel.SetSFTPUsers(
		devpanel.SFTPUser{Username: "alice", Password: sftpPass, Server: sftpSrvA, User: sftpOwner, Permissions: []string{"*"}},
		devpanel.SFTPUser{Username: "alice", Password: sftpPass, Server: sftpSrvB, User: sftpOwner, Permissions: []string{"*"}})
	return n
}

// promptly runs op and gives its error; ok is false when op had not
// returned after 10 s (a blocked request handler: the client gives up).
func promptly(op func() error) (err error, ok bool) {
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return err, true
	case <-time.After(10 * time.Second):
		return nil, false
	}
}

// A game process makes FIFOs in its directory (with and without a reader
// of its own); opening one through SFTP for writing, reading or both, or
// truncating it, never blocks a request handler: each request answers at
// once, opens and truncation with a failure. The file manager's write and
// contents answer too, and the node answers on every face afterwards.
func TestSFTPFIFOsNeverBlock(t *testing.T) {
	t.Parallel()
	n := dosNode(t, nil)
	dir := n.serverDir(sftpSrvA)
	for _, name := range []string{"lonely.fifo", "read.fifo"} {
		if err := syscall.Mkfifo(filepath.Join(dir, name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The game holds read.fifo open for reading: a write open of it then
	// succeeds in the kernel, and only a check of the file type refuses it.
	game, err := os.OpenFile(filepath.Join(dir, "read.fifo"), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer game.Close()
	writeFiles(t, dir, map[string]string{"plain.txt": "plain"})

	type attack struct {
		name   string
		op     func(c *sftpSession, p string) error
		refuse bool // the request must fail (not only answer)
	}
	openWith := func(flags int) func(c *sftpSession, p string) error {
		return func(c *sftpSession, p string) error {
			f, err := c.OpenFile(p, flags)
			if err != nil {
				return err
			}
			defer f.Close()
			if flags&os.O_WRONLY != 0 || flags&os.O_RDWR != 0 {
				_, err = f.Write([]byte("into the pipe"))
			} else {
				_, err = io.ReadAll(f)
			}
			return err
		}
	}
	attacks := []attack{
		{"open for writing", openWith(os.O_WRONLY), true},
		{"open for writing, truncating", openWith(os.O_WRONLY | os.O_CREATE | os.O_TRUNC), true},
		{"open for reading and writing", openWith(os.O_RDWR), true},
		{"open for reading", openWith(os.O_RDONLY), true},
		{"truncate (setstat size)", func(c *sftpSession, p string) error { return c.Truncate(p, 0) }, true},
		{"chmod (setstat mode)", func(c *sftpSession, p string) error { return c.Chmod(p, 0o600) }, false},
		{"chtimes (setstat times)", func(c *sftpSession, p string) error { return c.Chtimes(p, time.Now(), time.Now()) }, false},
	}
	for _, fifo := range []string{"/lonely.fifo", "/read.fifo"} {
		for _, a := range attacks {
			// A session of its own for each: a blocked handler would also
			// hold the requests queued behind it.
			c := n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
			err, ok := promptly(func() error { return a.op(c, fifo) })
			switch {
			case !ok:
				t.Errorf("%s %s: no answer within 10 s (the request handler is blocked)", a.name, fifo)
			case a.refuse && err == nil:
				t.Errorf("%s %s succeeded on a FIFO", a.name, fifo)
			case a.refuse && !strings.Contains(strings.ToLower(err.Error()), "not a regular file"):
				t.Errorf("%s %s: %v, want a failure that says it is not a regular file", a.name, fifo, err)
			}
			// Control: the same request on a regular file works.
			if err, ok := promptly(func() error { return a.op(c, "/plain.txt") }); !ok || err != nil {
				t.Errorf("control: %s /plain.txt: %v (answered: %v)", a.name, err, ok)
			}
		}
	}
	for _, name := range []string{"lonely.fifo", "read.fifo"} {
		if fi, err := os.Lstat(filepath.Join(dir, name)); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("%s is no longer the game's FIFO: %v %v", name, fi, err)
		}
	}
	if b, err := io.ReadAll(game); len(b) != 0 {
		t.Errorf("the game's FIFO received %q (%v)", b, err)
	}

	// The file manager: contents refuses a FIFO, write replaces it by a
	// regular file; both answer.
	if err, ok := promptly(func() error {
		res, body := n.request("GET", "/api/servers/"+sftpSrvA+"/files/contents?file=%2Flonely.fifo", nil, "")
		if res.StatusCode != http.StatusBadRequest {
			return fmt.Errorf("contents of a FIFO: %d %s", res.StatusCode, body)
		}
		return nil
	}); !ok || err != nil {
		t.Errorf("file manager contents: %v (answered: %v)", err, ok)
	}
	if err, ok := promptly(func() error {
		res, body := n.request("POST", "/api/servers/"+sftpSrvA+"/files/write?file=%2Fread.fifo", "written", "")
		if res.StatusCode != http.StatusNoContent {
			return fmt.Errorf("write over a FIFO: %d %s", res.StatusCode, body)
		}
		return nil
	}); !ok || err != nil {
		t.Errorf("file manager write: %v (answered: %v)", err, ok)
	}
	n.assertAnswersEveryFace(t, sftpSrvA)
}

// One session opens handles until it is refused: it gets a failure status
// at the cap (system.sftp.max_handles, 256 by default), the daemon's
// descriptors stay bounded, and another server's SFTP and the API keep
// answering meanwhile. One connection cannot open more than max_sessions
// SFTP channels either.
func TestSFTPHandleCapPerSession(t *testing.T) {
	t.Parallel()
	n := dosNode(t, nil)
	writeFiles(t, n.serverDir(sftpSrvA), map[string]string{"f.txt": "data"})
	c := n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
	if _, err := c.Stat("/"); err != nil {
		t.Fatal(err)
	}
	before := n.openFDs()

	const tries, capDefault = 2000, 256
	var held []*sftp.File
	var refusal error
	for range tries {
		f, err := c.Open("/f.txt")
		if err != nil {
			refusal = err
			break
		}
		held = append(held, f)
	}
	if refusal == nil {
		t.Fatalf("one session opened %d handles without a refusal; the daemon holds %d descriptors (%d before)", len(held), n.openFDs(), before)
	}
	if len(held) != capDefault || fxCode(refusal) != 4 || !strings.Contains(strings.ToLower(refusal.Error()), "too many open files") {
		t.Fatalf("refused after %d handles with %v (code %d), want SSH_FX_FAILURE \"too many open files\" after %d", len(held), refusal, fxCode(refusal), capDefault)
	}
	if fds := n.openFDs(); fds > before+capDefault+32 {
		t.Fatalf("the daemon holds %d descriptors (%d before %d handles)", fds, before, len(held))
	}

	// The neighbour and the API answer while the handles are held.
	b := n.sftpOpen(t, sftpLogin("alice", sftpSrvB), ssh.Password(sftpPass))
	putFile(t, b, "/neighbour.txt", []byte("still here"))
	if got, err := getFile(b, "/neighbour.txt"); err != nil || string(got) != "still here" {
		t.Fatalf("the neighbour's SFTP: %q %v", got, err)
	}
	n.assertAnswersEveryFace(t, sftpSrvB)

	// The cap counts open handles: one closed, one more opens.
	if err := held[0].Close(); err != nil {
		t.Fatal(err)
	}
	f, err := c.Open("/f.txt")
	if err != nil {
		t.Fatalf("a handle freed by a close cannot be used again: %v", err)
	}
	held[0] = f
	if _, err := c.Open("/f.txt"); err == nil {
		t.Fatal("the cap no longer holds after a close and a reopen")
	}
	for _, f := range held {
		f.Close()
	}
	if _, err := getFile(c, "/f.txt"); err != nil {
		t.Fatalf("after closing its handles the session cannot open a file: %v", err)
	}

	// Channels: at most max_sessions (10) SFTP subsystems on one connection.
	conn, err := n.sshDial(sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	opened := 0
	for range 50 {
		sc, err := sftp.NewClient(conn)
		if err != nil {
			break
		}
		defer sc.Close()
		opened++
	}
	if opened != 10 {
		t.Fatalf("one connection opened %d SFTP channels, want 10", opened)
	}
}

// floodConn is one TCP connection of a flood that never authenticates.
type floodConn struct {
	c       net.Conn
	greeted chan struct{} // closed when the daemon's SSH banner arrived (it accepted the connection)
	closed  chan struct{} // closed when the daemon closed the connection
}

func (fc *floodConn) is(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// flood opens count connections to addr from the loopback address from,
// then reads each (without ever answering) until the daemon closes it.
func flood(t *testing.T, addr, from string, count int) []*floodConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	out := make([]*floodConn, 0, count)
	for range count {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("flood from %s after %d connections: %v", from, len(out), err)
		}
		out = append(out, &floodConn{c: c, greeted: make(chan struct{}), closed: make(chan struct{})})
	}
	var wg sync.WaitGroup
	for _, fc := range out {
		_ = fc.c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		wg.Go(func() {
			defer close(fc.closed)
			r := bufio.NewReader(fc.c)
			if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "SSH-2.0-") {
				return
			}
			close(fc.greeted)
			_, _ = io.Copy(io.Discard, r)
		})
	}
	t.Cleanup(func() {
		for _, fc := range out {
			fc.c.Close()
		}
		wg.Wait()
	})
	return out
}

// settled waits until the daemon has greeted or closed each connection,
// and gives how many are held (greeted, still open) and how many it closed
// without a greeting (refused at accept).
func settled(t *testing.T, conns []*floodConn) (held, refused int) {
	t.Helper()
	wait.For(t, 20*time.Second, func() bool {
		held, refused = 0, 0
		pending := 0
		for _, fc := range conns {
			switch greeted, closed := fc.is(fc.greeted), fc.is(fc.closed); {
			case closed && !greeted:
				refused++
			case greeted && !closed:
				held++
			case !greeted && !closed:
				pending++
			}
		}
		return pending == 0
	}, "every flood connection to be greeted or closed")
	return held, refused
}

// Thousands of TCP connections that never authenticate: beyond the
// per-source cap they are closed at once, from many sources the total
// stays capped, the node answers on every face meanwhile (its own check
// connects from 127.0.0.1, a source of its own), the daemon's descriptors
// stay bounded, and the held ones are closed after the login grace time.
func TestSFTPUnauthenticatedFlood(t *testing.T) {
	t.Parallel()
	const grace = 10 // seconds
	n := dosNode(t, func(c *config.Config) { c.System.SFTP.LoginGraceTime = grace })
	c := n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
	before := n.openFDs()
	addr := n.sftpAddr()

	// One source: 2,000 connections; at most 10 (max_startups_per_source)
	// held at once, the others closed before the SSH banner.
	one := flood(t, addr, "127.0.0.2", 2000)
	held, refused := settled(t, one)
	t.Logf("one source: %d held, %d closed at accept", held, refused)
	if held < 1 || held > 10 || refused < len(one)/2 {
		t.Fatalf("one source: %d of %d connections held, %d closed at once; want at most 10 held, the rest closed\n%d descriptors in the daemon (%d before)",
			held, len(one), refused, n.openFDs(), before)
	}

	// Many sources: 20 more of 60 connections each; the unauthenticated
	// connections held stay at most max_startups (64).
	var many []*floodConn
	for i := 3; i < 23; i++ {
		many = append(many, flood(t, addr, fmt.Sprintf("127.0.0.%d", i), 60)...)
	}
	all := append(one, many...)
	var fds int
	if !wait.Until(10*time.Second, func() bool {
		held, _ = settled(t, all)
		fds = n.openFDs()
		return held <= 64 && fds <= before+64+32
	}) {
		t.Fatalf("%d unauthenticated connections held from 21 sources; the daemon holds %d descriptors (%d before)", held, fds, before)
	}
	t.Logf("21 sources: %d held; the daemon holds %d descriptors (%d before)", held, fds, before)
	// The node answers meanwhile, on a fresh connection of every face (a
	// new source gets in although the total is full), and the logged-in
	// session goes on.
	n.assertAnswersEveryFace(t, sftpSrvA)
	if _, err := c.Stat("/"); err != nil {
		t.Fatalf("an authenticated session failed during the flood: %v", err)
	}
	n.sftpOpen(t, sftpLogin("alice", sftpSrvB), ssh.Password(sftpPass))

	// The held connections are closed after the grace time.
	deadline := time.After((grace + 15) * time.Second)
	for _, fc := range all {
		select {
		case <-fc.closed:
		case <-deadline:
			t.Fatalf("an unauthenticated connection is still open %d s after the flood (login grace time %d s)", grace+15, grace)
		}
	}
	if _, err := c.Stat("/"); err != nil {
		t.Fatalf("the authenticated session was closed with the flood: %v", err)
	}
}

// Logged-in connections to one server are capped
// (system.sftp.max_connections_per_server): beyond it the connection's
// SFTP channel is refused with the reason, so a server's users cannot
// multiply max_handles by connections; other servers are not affected,
// and a closed connection frees its place.
func TestSFTPConnectionsPerServerCapped(t *testing.T) {
	t.Parallel()
	n := dosNode(t, func(c *config.Config) { c.System.SFTP.MaxConnectionsPerServer = 3 })
	var open []*sftpSession
	for range 3 {
		open = append(open, n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass)))
	}
	conn, err := n.sshDial(sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if sc, err := sftp.NewClient(conn); err == nil {
		sc.Close()
		t.Fatal("a fourth SFTP connection to a server capped at 3 was served")
	} else if !strings.Contains(err.Error(), "too many SFTP connections to this server") {
		t.Fatalf("the fourth connection was refused with %v, want the reason", err)
	}
	waitClosed(t, conn, 5*time.Second, "a refused connection")

	// Another server is not affected; a closed connection frees its place.
	n.sftpOpen(t, sftpLogin("alice", sftpSrvB), ssh.Password(sftpPass))
	open[0].close()
	wait.ForNoError(t, 10*time.Second, func() error {
		c, err := n.sshDial(sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sc, err := sftp.NewClient(c)
		if err == nil {
			sc.Close()
		}
		return err
	}, "a place freed by a closed connection to be given back")
	n.assertAnswersEveryFace(t, sftpSrvA)
}
