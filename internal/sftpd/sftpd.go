// Package sftpd is the SFTP server players use to reach their server's
// files: an SSH listener (golang.org/x/crypto/ssh) whose logins are checked
// by the panel (POST /api/remote/sftp/auth) and whose sessions serve the
// SFTP subsystem (github.com/pkg/sftp's request server) on the server's
// sandbox only, with the panel's permissions, the file manager's rules
// (denylist, disk limit while writing, no writes while suspended or during
// an exclusive job) and activity records.
//
// Sessions are registered with the server (server.AddSession), so
// suspension, deletion and deauthorization close them like websockets.
package sftpd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/cpu"

	"github.com/wharf/wharf/internal/backupview"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/server"
)

// Servers finds the servers of this node (server.Manager).
type Servers interface {
	Get(uuid string) (*server.Server, bool)
}

// Authenticator asks the panel about a login (panel.Client).
type Authenticator interface {
	ValidateSFTPCredentials(ctx context.Context, req panel.SFTPAuthRequest) (panel.SFTPAuthResponse, error)
}

// Recorder queues activity records (activity.Queue).
type Recorder interface {
	Record(a panel.Activity)
}

// Options configure a Server.
type Options struct {
	// Config returns the current system.sftp settings; the listener
	// address is read when it is opened, read_only and key_only at every
	// login.
	Config  func() config.SFTP
	DataDir string // system.data: the host key lives under it
	Servers Servers
	Panel   Authenticator
	// Activity receives the sftp events; nil drops them.
	Activity Recorder
	// Browse is the backups folder of the servers' files (issue 35); nil:
	// none.
	Browse *backupview.View
	Log    *slog.Logger
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

const (
	// authTimeout bounds one panel call during a login.
	authTimeout   = 15 * time.Second
	maxRetryDelay = 30 * time.Second
)

// Server is the SFTP server of the node.
type Server struct {
	opts      Options
	log       *slog.Logger
	limiter   *loginLimiter
	startups  *startupGate
	perServer *serverConns
	sessions  atomic.Int64 // authenticated connections open now
	readBufs  *readBufPool // the sessions' read buffers (readbuf.go)
	pacer     *gcPacer     // the collector's pace while uploads write (gcpace.go)
	// defaults stand in for limits a caller's configuration left at zero.
	defaults config.SFTP
}

// New returns a server; Run serves it.
func New(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{
		opts: opts, log: opts.Log.With("component", "sftp"),
		limiter: newLoginLimiter(opts.Now), startups: newStartupGate(), perServer: newServerConns(),
		readBufs: newReadBufPool(),
		defaults: config.Defaults().System.SFTP,
	}
	s.pacer = newGCPacer(s.uploadHeadroom)
	return s
}

// uploadHeadroom is system.sftp.upload_gc_headroom in bytes (read at each
// tuning of the collector's pace: a change applies to the next uploads).
func (s *Server) uploadHeadroom() uint64 {
	return uint64(max(0, s.opts.Config().UploadGCHeadroom)) << 20
}

// Sessions is the number of SFTP sessions (authenticated connections)
// open now, for the metrics.
func (s *Server) Sessions() int { return int(s.sessions.Load()) }

// config is the current system.sftp with every limit at least 1 (a zero
// from a caller that left it out takes the default).
func (s *Server) config() config.SFTP {
	c, d := s.opts.Config(), s.defaults
	atLeastOne := func(v *int, def int) {
		if *v < 1 {
			*v = def
		}
	}
	atLeastOne(&c.MaxHandles, d.MaxHandles)
	atLeastOne(&c.MaxSessions, d.MaxSessions)
	atLeastOne(&c.MaxConnectionsPerServer, d.MaxConnectionsPerServer)
	atLeastOne(&c.MaxStartups, d.MaxStartups)
	atLeastOne(&c.MaxStartupsPerSource, d.MaxStartupsPerSource)
	atLeastOne(&c.LoginGraceTime, d.LoginGraceTime)
	return c
}

// Run listens and serves until ctx ends, then closes every open session
// and returns once all of its goroutines have. A listener that cannot be
// opened (port taken, host key unreadable) is logged as an error and
// retried: SFTP failing never stops the daemon.
func (s *Server) Run(ctx context.Context) {
	defer s.pacer.stop()
	delay := time.Second
	for ctx.Err() == nil {
		ln, signer, err := s.open()
		if err != nil {
			s.log.Error("the SFTP server cannot start; retrying", "error", err, "retry_in", delay.String())
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			delay = min(2*delay, maxRetryDelay)
			continue
		}
		delay = time.Second
		s.serve(ctx, ln, signer)
	}
}

func (s *Server) open() (net.Listener, ssh.Signer, error) {
	signer, err := loadOrCreateHostKey(HostKeyPath(s.opts.DataDir))
	if err != nil {
		return nil, nil, err
	}
	c := s.opts.Config()
	addr := net.JoinHostPort(c.BindAddress, strconv.Itoa(c.BindPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	s.log.Info("SFTP listening", "address", ln.Addr().String(), "host_key", ssh.FingerprintSHA256(signer.PublicKey()))
	return ln, signer, nil
}

// serve accepts connections until ctx ends or the listener fails.
func (s *Server) serve(ctx context.Context, ln net.Listener, signer ssh.Signer) {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	defer ln.Close()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// EMFILE and friends: back off a little rather than spin.
			s.log.Warn("SFTP accept failed", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		// Counted from accept until the login: beyond the caps the
		// connection is closed before anything is sent.
		c := s.config()
		p := s.startups.admit(nc, c.MaxStartups, c.MaxStartupsPerSource)
		if p == nil {
			s.log.Debug("SFTP connection refused: too many unauthenticated connections", "remote", nc.RemoteAddr().String())
			_ = nc.Close()
			continue
		}
		wg.Go(func() { s.handleConn(ctx, nc, p, signer, c) })
	}
}

// handleConn runs one SSH connection: handshake and login, then its
// session channels. The recover is the last resort for a bug reachable by
// a client (attacks.md D5): one connection fails, the daemon stays.
func (s *Server) handleConn(ctx context.Context, nc net.Conn, p *pending, signer ssh.Signer, c config.SFTP) {
	defer nc.Close()
	defer s.startups.release(p)
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("SFTP connection panicked; closed", "remote", nc.RemoteAddr().String(), "panic", r, "stack", string(debug.Stack()))
		}
	}()
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	defer stop()

	// The login grace time: a client that connects and says nothing, or
	// never logs in, is closed when it passes.
	_ = nc.SetDeadline(time.Now().Add(time.Duration(c.LoginGraceTime) * time.Second))
	sconn, chans, reqs, err := ssh.NewServerConn(nc, s.serverConfig(signer))
	if err != nil {
		s.log.Debug("SFTP handshake failed", "remote", nc.RemoteAddr().String(), "error", err)
		return
	}
	// Logged in: no longer pending, no longer timed.
	s.startups.release(p)
	_ = nc.SetDeadline(time.Time{})

	var wg sync.WaitGroup
	defer wg.Wait()
	defer sconn.Close()
	wg.Go(func() { ssh.DiscardRequests(reqs) })

	sess, err := s.newSession(sconn)
	if err != nil {
		s.log.Warn("SFTP session refused after login", "user", sconn.User(), "error", err)
		return
	}
	if !s.perServer.take(sess.srv.UUID(), c.MaxConnectionsPerServer) {
		s.log.Warn("SFTP session refused: too many connections to this server", "server", sess.srv.UUID(), "user", sess.user, "ip", sess.ip, "limit", c.MaxConnectionsPerServer)
		refuseChannels(nc, chans, time.Duration(c.LoginGraceTime)*time.Second, "too many SFTP connections to this server")
		return
	}
	defer s.perServer.release(sess.srv.UUID())
	remove := sess.srv.AddSession(sess)
	defer remove()
	s.sessions.Add(1)
	defer s.sessions.Add(-1)
	s.log.Info("SFTP session opened", "server", sess.srv.UUID(), "user", sess.user, "ip", sess.ip)
	defer s.log.Debug("SFTP session closed", "server", sess.srv.UUID(), "user", sess.user, "ip", sess.ip)

	var open atomic.Int64
	for nch := range chans {
		if nch.ChannelType() != "session" {
			_ = nch.Reject(ssh.UnknownChannelType, "only session channels are served")
			continue
		}
		if open.Load() >= int64(c.MaxSessions) {
			_ = nch.Reject(ssh.ResourceShortage, "too many sessions on this connection")
			continue
		}
		ch, creqs, err := nch.Accept()
		if err != nil {
			continue
		}
		open.Add(1)
		wg.Go(func() {
			defer open.Add(-1)
			s.serveChannel(sess, ch, creqs)
		})
	}
}

// serveChannel answers a session channel's requests: only the sftp
// subsystem is served (no shell, exec or pty).
func (s *Server) serveChannel(sess *session, ch ssh.Channel, reqs <-chan *ssh.Request) {
	var wg sync.WaitGroup
	defer ch.Close()
	defer wg.Wait()
	started := false
	for req := range reqs {
		ok := !started && req.Type == "subsystem" && subsystemName(req.Payload) == "sftp"
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
		if ok {
			started = true
			wg.Go(func() {
				defer ch.Close()
				s.serveSFTP(sess, ch)
			})
		}
	}
}

// subsystemName reads the name of a subsystem request (an SSH string:
// uint32 length, then the bytes). A payload too short for its length is
// no name at all: it never panics (GHSA-ghrq-5wpp-hxx5).
func subsystemName(payload []byte) string {
	if len(payload) < 4 {
		return ""
	}
	n := uint64(payload[0])<<24 | uint64(payload[1])<<16 | uint64(payload[2])<<8 | uint64(payload[3])
	if n > uint64(len(payload)-4) {
		return ""
	}
	return string(payload[4 : 4+n])
}

func (s *Server) serveSFTP(sess *session, ch ssh.Channel) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("SFTP session panicked; closed", "server", sess.srv.UUID(), "panic", r, "stack", string(debug.Stack()))
		}
	}()
	h := &handlers{sess: sess, browse: s.opts.Browse, pacer: s.pacer}
	rs := sftp.NewRequestServer(newBufferedChannel(ch, s.readBufs), sftp.Handlers{FileGet: h, FilePut: h, FileCmd: h, FileList: h})
	if err := rs.Serve(); err != nil && !errors.Is(err, io.EOF) {
		s.log.Debug("SFTP session ended", "server", sess.srv.UUID(), "error", err)
	}
	_ = rs.Close()
}

// Algorithms: modern ones only (the list Wings offers, plus the newer
// post-quantum hybrid exchange and the 512-bit MACs).
var (
	kexAlgorithms = []string{
		ssh.KeyExchangeMLKEM768X25519, ssh.KeyExchangeCurve25519, "curve25519-sha256@libssh.org",
		ssh.KeyExchangeECDHP256, ssh.KeyExchangeECDHP384, ssh.KeyExchangeECDHP521, ssh.KeyExchangeDH14SHA256,
	}
	cipherAlgorithms = []string{
		ssh.CipherAES128GCM, ssh.CipherAES256GCM, ssh.CipherChaCha20Poly1305,
		ssh.CipherAES128CTR, ssh.CipherAES192CTR, ssh.CipherAES256CTR,
	}
	// cipherAlgorithmsAESNI is the list on an x86-64 CPU with AES and
	// carry-less multiplication instructions (issue 38 §1b): the client's
	// order picks the cipher among the server's, and OpenSSH's asks for
	// ChaCha20-Poly1305 first, which golang.org/x/crypto computes in
	// generic Go on amd64 (a fifth of the daemon's CPU in an upload),
	// where AES-GCM and AES-CTR run on the CPU's instructions. Leaving it
	// out there makes OpenSSH take AES-CTR with HMAC-SHA2-256-ETM (its
	// next choice), the Go client AES-GCM as before; every SSH client
	// offers AES-CTR.
	cipherAlgorithmsAESNI = []string{
		ssh.CipherAES128GCM, ssh.CipherAES256GCM,
		ssh.CipherAES128CTR, ssh.CipherAES192CTR, ssh.CipherAES256CTR,
	}
	macAlgorithms = []string{ssh.HMACSHA256ETM, ssh.HMACSHA512ETM, ssh.HMACSHA256, ssh.HMACSHA512}
)

// ciphers is the server's list of ciphers for a CPU with (aesni) or without
// AES instructions.
func ciphers(aesni bool) []string {
	if aesni {
		return cipherAlgorithmsAESNI
	}
	return cipherAlgorithms
}

// hasAESNI tells whether this CPU computes AES-GCM and AES-CTR in hardware
// where ChaCha20 has no assembly in golang.org/x/crypto (amd64).
func hasAESNI() bool {
	return runtime.GOARCH == "amd64" && cpu.X86.HasAES && cpu.X86.HasPCLMULQDQ
}

// maxAuthTries is the number of failed authentication attempts one
// connection may make.
const maxAuthTries = 6

func (s *Server) serverConfig(signer ssh.Signer) *ssh.ServerConfig {
	c := s.opts.Config()
	cfg := &ssh.ServerConfig{
		Config:        ssh.Config{KeyExchanges: kexAlgorithms, Ciphers: ciphers(hasAESNI()), MACs: macAlgorithms},
		MaxAuthTries:  maxAuthTries,
		ServerVersion: "SSH-2.0-Wharf",
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			return s.authenticate(meta, "public_key", string(ssh.MarshalAuthorizedKey(key)))
		},
	}
	if !c.KeyOnly {
		cfg.PasswordCallback = func(meta ssh.ConnMetadata, password []byte) (*ssh.Permissions, error) {
			return s.authenticate(meta, "password", string(password))
		}
	}
	cfg.AddHostKey(signer)
	return cfg
}
