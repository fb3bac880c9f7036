package e2e

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// The SFTP tests' servers and users.
const (
	sftpSrvA   = "a1b2c3d4-0000-4000-8000-0000000000a1"
	sftpSrvB   = "b2c3d4e5-0000-4000-8000-0000000000b2"
	sftpOwner  = "11111111-1111-4111-8111-111111111111"
	sftpOther  = "22222222-2222-4222-8222-222222222222"
	sftpPass   = "correct horse battery staple"
	sftpOther2 = "other-password"
)

func sftpServerDef(uuid string, diskMB int, denylist []string) devpanel.Server {
	s := exampleServer(uuid)
	s.Settings["build"] = map[string]any{"memory_limit": 128, "disk_space": diskMB}
	if denylist != nil {
		s.Settings["egg"] = map[string]any{"file_denylist": denylist}
	}
	return s
}

// startSFTPNode starts a daemon (its SFTP server listens on a free
// loopback port, as every test node's does).
func startSFTPNode(t testing.TB, mutate func(c *config.Config), servers ...devpanel.Server) *node {
	t.Helper()
	return startNode(t, nodeOptions{fake: true, servers: servers, mutate: mutate})
}

func sftpLogin(user, server string) string { return user + "." + server[:8] }

func newSSHKey(t testing.TB) (ssh.Signer, ed25519.PrivateKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s, priv
}

func authorizedKey(s ssh.Signer) string { return string(ssh.MarshalAuthorizedKey(s.PublicKey())) }

func (n *node) sftpAddr() string { return fmt.Sprintf("127.0.0.1:%d", n.Config.System.SFTP.BindPort) }

// sshDial logs in, waiting for the listener to come up (it starts just
// before the API).
func (n *node) sshDial(user string, auth ...ssh.AuthMethod) (*ssh.Client, error) {
	cfg := &ssh.ClientConfig{User: user, Auth: auth, HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second}
	var c *ssh.Client
	var err error
	// The listener comes up next to the API: a refusal at boot is retried.
	wait.Until(15*time.Second, func() bool {
		c, err = ssh.Dial("tcp", n.sftpAddr(), cfg)
		return err == nil || !errors.Is(err, syscall.ECONNREFUSED)
	})
	return c, err
}

// sftpSession is an SFTP client with its SSH connection.
type sftpSession struct {
	*sftp.Client
	ssh *ssh.Client
}

func (s *sftpSession) close() {
	_ = s.Client.Close()
	_ = s.ssh.Close()
}

// sftpOpen logs in and starts the sftp subsystem; the test fails if either fails.
func (n *node) sftpOpen(t testing.TB, user string, auth ...ssh.AuthMethod) *sftpSession {
	t.Helper()
	c, err := n.sshDial(user, auth...)
	if err != nil {
		t.Fatalf("ssh login as %s: %v\n%s", user, err, n.log)
	}
	sc, err := sftp.NewClient(c)
	if err != nil {
		c.Close()
		t.Fatalf("sftp subsystem: %v", err)
	}
	s := &sftpSession{Client: sc, ssh: c}
	t.Cleanup(s.close)
	return s
}

// fxCode is the SFTP status code of an error returned by the pkg/sftp
// client (which turns 2 and 3 into os errors).
func fxCode(err error) uint32 {
	var se *sftp.StatusError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, os.ErrNotExist):
		return 2
	case errors.Is(err, os.ErrPermission):
		return 3
	case errors.As(err, &se):
		return se.Code
	}
	return 4
}

// waitClosed waits until the SSH connection is closed by the server.
func waitClosed(t *testing.T, c *ssh.Client, within time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("%s: the SFTP session is still open after %s", what, within)
	}
}

func putFile(t *testing.T, c *sftpSession, name string, data []byte) {
	t.Helper()
	f, err := c.Create(name)
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", name, err)
	}
}

func getFile(c *sftpSession, name string) ([]byte, error) {
	f, err := c.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
