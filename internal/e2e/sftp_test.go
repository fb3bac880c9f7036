package e2e

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/sftpd"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// Logins: password and key accepted; a wrong password, an unknown short
// id, a malformed name and a panel error refused alike; the auth body is
// the one Wings sends; the host key is ED25519 PKCS#8 0600 and survives a
// restart.
func TestSFTPLogin(t *testing.T) {
	t.Parallel()
	key, _ := newSSHKey(t)
	n := startSFTPNode(t, nil, sftpServerDef(sftpSrvA, 0, nil))
	n.Panel.SetSFTPUsers(devpanel.SFTPUser{Username: "alice", Password: sftpPass, Keys: []string{authorizedKey(key)},
		Server: sftpSrvA, User: sftpOwner, Permissions: []string{"*"}})

	s := n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
	if _, err := s.ReadDir("/"); err != nil {
		t.Fatalf("list after password login: %v", err)
	}
	calls := n.Panel.CallsTo("POST", "/sftp/auth")
	if len(calls) != 1 {
		t.Fatalf("%d auth calls", len(calls))
	}
	var body map[string]any
	if err := json.Unmarshal(calls[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if body["type"] != "password" || body["username"] != "alice.a1b2c3d4" || body["password"] != sftpPass ||
		!strings.HasPrefix(body["ip"].(string), "127.0.0.1:") || body["session_id"] == "" || body["client_version"] == "" {
		t.Fatalf("auth body %v", body)
	}
	if got := calls[0].Header.Get("Authorization"); got != "Bearer e2etokenid.e2e-node-token-7f3c9a1b5d" {
		t.Fatalf("auth call credentials %q", got)
	}

	k := n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.PublicKeys(key))
	if _, err := k.Stat("/"); err != nil {
		t.Fatalf("stat after key login: %v", err)
	}
	last := n.Panel.CallsTo("POST", "/sftp/auth")
	json.Unmarshal(last[len(last)-1].Body, &body)
	if body["type"] != "public_key" || body["password"] != authorizedKey(key) {
		t.Fatalf("key auth body %v", body)
	}

	before := len(n.Panel.CallsTo("POST", "/sftp/auth"))
	other, _ := newSSHKey(t)
	for _, tc := range []struct {
		name, user string
		auth       ssh.AuthMethod
		asksPanel  bool
	}{
		{"wrong password", sftpLogin("alice", sftpSrvA), ssh.Password("nope"), true},
		{"unknown key", sftpLogin("alice", sftpSrvA), ssh.PublicKeys(other), true},
		{"unknown short id", "alice.deadbeef", ssh.Password(sftpPass), true},
		{"no short id", "alice", ssh.Password(sftpPass), false},
		{"short id too short", "alice.a1b2c3", ssh.Password(sftpPass), false},
	} {
		if c, err := n.sshDial(tc.user, tc.auth); err == nil {
			c.Close()
			t.Fatalf("%s: login accepted", tc.name)
		} else if !strings.Contains(err.Error(), "unable to authenticate") {
			t.Fatalf("%s: %v", tc.name, err)
		}
		now := len(n.Panel.CallsTo("POST", "/sftp/auth"))
		if asked := now > before; asked != tc.asksPanel {
			t.Fatalf("%s: panel asked = %v", tc.name, asked)
		}
		before = now
	}

	// A panel that fails (5xx) or refuses (409) is a refusal too.
	for _, status := range []int{500, 409} {
		n.Panel.SetSFTPStatus(status)
		if c, err := n.sshDial(sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass)); err == nil {
			c.Close()
			t.Fatalf("login accepted while the panel answers %d", status)
		}
	}
	n.Panel.SetSFTPStatus(0)

	// The host key: Wings' place and format, kept across a restart.
	path := sftpd.HostKeyPath(n.Config.System.Data)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("host key %v %v", fi, err)
	}
	data, _ := os.ReadFile(path)
	blk, _ := pem.Decode(data)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		t.Fatalf("host key is not PKCS#8 PEM: %q", data)
	}
	if _, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err != nil {
		t.Fatal(err)
	}
	fp := hostKeyOf(t, n)
	n.stop()
	n.restart()
	if fp2 := hostKeyOf(t, n); fp2 != fp {
		t.Fatalf("host key changed across a restart: %s then %s", fp, fp2)
	}
}

// hostKeyOf connects and returns the server's host key fingerprint.
func hostKeyOf(t *testing.T, n *node) string {
	t.Helper()
	var fp string
	cfg := &ssh.ClientConfig{User: "x.12345678", Auth: []ssh.AuthMethod{ssh.Password("x")}, Timeout: 10 * time.Second,
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			fp = ssh.FingerprintSHA256(key)
			if key.Type() != ssh.KeyAlgoED25519 {
				t.Errorf("host key type %s", key.Type())
			}
			return nil
		}}
	wait.Until(15*time.Second, func() bool {
		if c, err := ssh.Dial("tcp", n.sftpAddr(), cfg); err == nil {
			c.Close()
		}
		return fp != ""
	})
	if fp == "" {
		t.Fatal("no host key seen")
	}
	return fp
}

// A host key written by Wings (same path, PKCS#8 PEM) is used as it is.
func TestSFTPKeepsAWingsHostKey(t *testing.T) {
	t.Parallel()
	signer, priv := newSSHKey(t)
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pemData := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	n := startSFTPNode(t, func(c *config.Config) {
		p := sftpd.HostKeyPath(c.System.Data)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, pemData, 0o600); err != nil {
			t.Fatal(err)
		}
	}, sftpServerDef(sftpSrvA, 0, nil))
	if got, want := hostKeyOf(t, n), ssh.FingerprintSHA256(signer.PublicKey()); got != want {
		t.Fatalf("host key %s, want the pre-written %s", got, want)
	}
	if data, _ := os.ReadFile(sftpd.HostKeyPath(n.Config.System.Data)); !bytes.Equal(data, pemData) {
		t.Fatal("the host key file was rewritten")
	}
}

// key_only refuses passwords without asking the panel; keys still work.
func TestSFTPKeyOnly(t *testing.T) {
	t.Parallel()
	key, _ := newSSHKey(t)
	n := startSFTPNode(t, func(c *config.Config) { c.System.SFTP.KeyOnly = true }, sftpServerDef(sftpSrvA, 0, nil))
	n.Panel.SetSFTPUsers(devpanel.SFTPUser{Username: "alice", Password: sftpPass, Keys: []string{authorizedKey(key)},
		Server: sftpSrvA, User: sftpOwner, Permissions: []string{"*"}})
	if c, err := n.sshDial(sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass)); err == nil {
		c.Close()
		t.Fatal("password accepted with key_only")
	}
	if calls := n.Panel.CallsTo("POST", "/sftp/auth"); len(calls) != 0 {
		t.Fatalf("the panel was asked about a password: %d calls", len(calls))
	}
	n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.PublicKeys(key))
}

// At most 6 authentication attempts per connection, and no legacy
// algorithm is offered.
func TestSFTPAuthAttemptsAndAlgorithms(t *testing.T) {
	t.Parallel()
	n := startSFTPNode(t, nil, sftpServerDef(sftpSrvA, 0, nil))
	var keys []ssh.Signer
	for range 8 {
		k, _ := newSSHKey(t)
		keys = append(keys, k)
	}
	c, err := n.sshDial(sftpLogin("alice", sftpSrvA), ssh.PublicKeys(keys...))
	if err == nil {
		c.Close()
		t.Fatal("login accepted")
	}
	if got := len(n.Panel.CallsTo("POST", "/sftp/auth")); got > 6 {
		t.Fatalf("%d attempts on one connection reached the panel, want at most 6", got)
	}
	for _, cfg := range []ssh.Config{
		{Ciphers: []string{"aes128-cbc", "3des-cbc"}},
		{KeyExchanges: []string{"diffie-hellman-group1-sha1", "diffie-hellman-group14-sha1"}},
		{Ciphers: []string{"aes128-ctr"}, MACs: []string{"hmac-sha1", "hmac-sha1-96"}},
	} {
		cc := &ssh.ClientConfig{Config: cfg, User: "alice.a1b2c3d4", Auth: []ssh.AuthMethod{ssh.Password("x")},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second}
		if c, err := ssh.Dial("tcp", n.sftpAddr(), cc); err == nil {
			c.Close()
			t.Fatalf("handshake with %+v succeeded", cfg)
		} else if !strings.Contains(err.Error(), "no common algorithm") {
			t.Fatalf("handshake with %+v: %v", cfg, err)
		}
	}
}
