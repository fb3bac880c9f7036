package sftpd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/testutil/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSubsystemNameNeverPanics(t *testing.T) {
	for _, tc := range []struct {
		payload []byte
		want    string
	}{
		{nil, ""}, {[]byte{0}, ""}, {[]byte{0, 0, 0}, ""}, {[]byte{0, 0, 0, 0}, ""},
		{[]byte{0, 0, 0, 4, 's', 'f'}, ""}, {[]byte{0xff, 0xff, 0xff, 0xff, 'x'}, ""},
		{[]byte{0, 0, 0, 4, 's', 'f', 't', 'p'}, "sftp"}, {[]byte{0, 0, 0, 2, 's', 'f', 't', 'p'}, "sf"},
	} {
		if got := subsystemName(tc.payload); got != tc.want {
			t.Errorf("subsystemName(%v) = %q, want %q", tc.payload, got, tc.want)
		}
	}
}

func FuzzSubsystemName(f *testing.F) {
	f.Add([]byte{0, 0, 0, 4, 's', 'f', 't', 'p'})
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, b []byte) { _ = subsystemName(b) })
}

func TestLoginLimiterBurstRefillRefund(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLoginLimiter(func() time.Time { return now })
	for i := range loginBurst {
		if !l.take("1.2.3.4") {
			t.Fatalf("attempt %d refused", i)
		}
	}
	if l.take("1.2.3.4") {
		t.Fatal("attempt past the burst allowed")
	}
	if !l.take("5.6.7.8") {
		t.Fatal("another address is limited too")
	}
	now = now.Add(loginRefill)
	if !l.take("1.2.3.4") || l.take("1.2.3.4") {
		t.Fatal("one attempt per refill period expected")
	}
	l.refund("1.2.3.4")
	if !l.take("1.2.3.4") {
		t.Fatal("a refunded attempt is not available")
	}
}

func TestSymlinkTargetsStayInside(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		want string
	}{
		{"/a/b", true, "/a/b"}, {"/a/../b", true, "/b"}, {"/..", false, ""}, {"/a/../../b", false, ""}, {"/", true, "/"},
	} {
		got, ok := insideRoot(tc.name)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("insideRoot(%q) = %q %v", tc.name, got, ok)
		}
	}
	for _, tc := range []struct{ dir, target, want string }{
		{"/plugins", "/plugins/a.jar", "a.jar"}, {"/a/b", "/c", "../../c"}, {"/", "/x/y", "x/y"}, {"/a", "/", ".."}, {"/a", "/a", "."},
	} {
		if got, _ := relativeTo(tc.dir, tc.target); got != tc.want {
			t.Errorf("relativeTo(%q, %q) = %q, want %q", tc.dir, tc.target, got, tc.want)
		}
	}
}

func TestPermissionBits(t *testing.T) {
	for _, tc := range []struct {
		mode uint32
		dir  bool
		want os.FileMode
	}{
		{0o100755, false, 0o755}, {0o4755, false, 0o755}, {0, false, 0o644}, {0o600, false, 0o600},
		{0o40700, true, 0o700}, {0o600, true, 0o755}, {0o2775, true, 0o775},
	} {
		if got := permissionBits(tc.mode, tc.dir); got != tc.want {
			t.Errorf("permissionBits(%o, dir=%v) = %o, want %o", tc.mode, tc.dir, got, tc.want)
		}
	}
}

type fakePanel struct {
	mu    sync.Mutex
	calls int
}

func (p *fakePanel) ValidateSFTPCredentials(context.Context, panel.SFTPAuthRequest) (panel.SFTPAuthResponse, error) {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	return panel.SFTPAuthResponse{}, &panel.RequestError{Status: 403}
}

type noServers struct{}

func (noServers) Get(string) (*server.Server, bool) { return nil, false }

type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *syncLog) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// A port that is taken is an error in the log and a retry, not a daemon
// failure; once free, the server listens; a cancelled context closes the
// listener and open connections, and every goroutine ends (goleak).
func TestRunRetriesBindAndStopsCleanly(t *testing.T) {
	blocker, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := blocker.Addr().(*net.TCPAddr).Port
	logs := &syncLog{}
	data := t.TempDir()
	p := &fakePanel{}
	s := New(Options{
		Config:  func() config.SFTP { return config.SFTP{BindAddress: "127.0.0.1", BindPort: port} },
		DataDir: data, Servers: noServers{}, Panel: p,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()

	wait.For(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "the SFTP server cannot start") }, "bind error logged")
	blocker.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	wait.For(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "SFTP listening") }, "listening after the retry")

	// A login refused by the panel, and a client that connects and stays
	// silent (it must not hold the shutdown).
	_, err = ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "bob.abcdef12", Auth: []ssh.AuthMethod{ssh.Password("x")}, HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	p.mu.Lock()
	calls := p.calls
	p.mu.Unlock()
	if err == nil || calls != 1 {
		t.Fatalf("login: %v, %d panel calls", err, calls)
	}
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	silent.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadAll(silent); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Logf("silent client: %v", err)
	}
	if _, err := os.Stat(HostKeyPath(data)); err != nil {
		t.Fatal(err)
	}
}
