package sftpd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/server"
)

// usernamePattern is <panel username>.<first 8 characters of the server
// UUID>: anything else is refused without asking the panel.
var usernamePattern = regexp.MustCompile(`(?i)^(.+)\.([a-z0-9]{8})$`)

// maxUsernameLength bounds what is sent to the panel.
const maxUsernameLength = 255

// errLoginRefused is the only answer a client gets for a failed login,
// whatever part was wrong.
var errLoginRefused = errors.New("sftp: login refused")

// Extensions of ssh.Permissions carrying the panel's answer to the session.
const (
	extServer      = "wharf-server"
	extUser        = "wharf-user"
	extPermissions = "wharf-permissions"
)

// authenticate checks one login with the panel. Every failure is the same
// error to the client; the log says why.
func (s *Server) authenticate(meta ssh.ConnMetadata, kind, secret string) (*ssh.Permissions, error) {
	addr := meta.RemoteAddr().String()
	ip := hostOf(addr)
	if !s.limiter.take(ip) {
		s.log.Warn("SFTP login refused: too many failed logins from this address", "ip", ip, "user", meta.User())
		return nil, errLoginRefused
	}
	perms, err := s.askPanel(meta, kind, secret, addr)
	if err != nil {
		s.log.Info("SFTP login refused", "ip", ip, "user", meta.User(), "method", kind, "reason", err.Error())
		return nil, errLoginRefused
	}
	s.limiter.refund(ip)
	return perms, nil
}

func (s *Server) askPanel(meta ssh.ConnMetadata, kind, secret, addr string) (*ssh.Permissions, error) {
	name := meta.User()
	m := usernamePattern.FindStringSubmatch(name)
	if len(name) > maxUsernameLength || m == nil {
		return nil, errors.New("the user name is not <user>.<server short id>")
	}
	shortID := strings.ToLower(m[2])
	ctx, cancel := context.WithTimeout(context.Background(), authTimeout)
	defer cancel()
	res, err := s.opts.Panel.ValidateSFTPCredentials(ctx, panel.SFTPAuthRequest{
		Type: kind, Username: name, Password: secret, IP: addr,
		SessionID: meta.SessionID(), ClientVersion: meta.ClientVersion(),
	})
	if err != nil {
		var re *panel.RequestError
		if errors.As(err, &re) && re.Status >= http.StatusBadRequest && re.Status < http.StatusInternalServerError {
			return nil, fmt.Errorf("the panel refused the credentials (HTTP %d)", re.Status)
		}
		return nil, fmt.Errorf("the panel could not check the credentials: %w", err)
	}
	id := strings.ToLower(res.Server)
	if !strings.HasPrefix(id, shortID) {
		return nil, fmt.Errorf("the panel answered for server %s, not %s", id, shortID)
	}
	srv, ok := s.opts.Servers.Get(id)
	if !ok {
		return nil, fmt.Errorf("server %s is not on this node", id)
	}
	if srv.IsSuspended() {
		return nil, fmt.Errorf("server %s is suspended", id)
	}
	if res.User == "" {
		return nil, errors.New("the panel answered without a user")
	}
	return &ssh.Permissions{Extensions: map[string]string{
		extServer:      id,
		extUser:        res.User,
		extPermissions: strings.Join(res.Permissions, "\n"),
	}}, nil
}

// hostOf strips the port of a remote address.
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// newSession builds the session of an authenticated connection.
func (s *Server) newSession(sconn *ssh.ServerConn) (*session, error) {
	ext := sconn.Permissions.Extensions
	srv, ok := s.opts.Servers.Get(ext[extServer])
	if !ok {
		return nil, errors.New("the server is gone")
	}
	perms := map[string]bool{}
	for _, p := range strings.Split(ext[extPermissions], "\n") {
		if p != "" {
			perms[p] = true
		}
	}
	return &session{
		conn: sconn, srv: srv, user: ext[extUser], ip: hostOf(sconn.RemoteAddr().String()),
		perms: perms, readOnly: s.opts.Config().ReadOnly, activity: s.opts.Activity, now: s.opts.Now,
		log:        s.log.With("server", srv.UUID(), "user", ext[extUser]),
		maxHandles: int64(s.config().MaxHandles),
	}, nil
}

var _ server.Session = (*session)(nil)
