package devpanel

import (
	"encoding/json"
	"net/http"
	"strings"
)

// SFTPUser is an account the fake panel accepts on POST /sftp/auth: the
// login <Username>.<first 8 characters of Server> with Password, or with
// one of Keys (authorized_keys lines).
type SFTPUser struct {
	Username    string
	Password    string
	Keys        []string
	Server      string // server UUID
	User        string // user UUID
	Permissions []string
}

// SetSFTPUsers replaces the accounts.
func (p *Panel) SetSFTPUsers(users ...SFTPUser) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sftpUsers = append([]SFTPUser(nil), users...)
}

// SetSFTPStatus makes every /sftp/auth answer status (0 = answer normally).
func (p *Panel) SetSFTPStatus(status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sftpStatus = status
}

// sftpAuth answers like the panel's SftpAuthenticationController: 403 for
// any wrong part (user, server, password or key), 409 for a suspended
// server, 200 with the server, the user and the permissions otherwise.
func (p *Panel) sftpAuth(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Type     string `json:"type"`
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, "BadRequestHttpException", "invalid body")
		return
	}
	p.mu.Lock()
	status, users := p.sftpStatus, p.sftpUsers
	p.mu.Unlock()
	if status != 0 {
		writeErr(w, status, "HttpException", "configured answer")
		return
	}
	i := strings.LastIndexByte(req.Username, '.')
	if i < 0 {
		writeErr(w, http.StatusBadRequest, "BadRequestHttpException", "no server part")
		return
	}
	name, short := req.Username[:i], strings.ToLower(req.Username[i+1:])
	for _, u := range users {
		if u.Username != name || !strings.HasPrefix(u.Server, short) {
			continue
		}
		ok := false
		switch req.Type {
		case "password":
			ok = u.Password != "" && req.Password == u.Password
		case "public_key":
			for _, k := range u.Keys {
				ok = ok || strings.TrimSpace(k) == strings.TrimSpace(req.Password)
			}
		}
		if !ok {
			break
		}
		p.mu.Lock()
		srv, found := p.servers[u.Server]
		suspended := found && srv.Settings["suspended"] == true
		p.mu.Unlock()
		if suspended {
			writeErr(w, http.StatusConflict, "ConflictHttpException", "This server is suspended.")
			return
		}
		writeJSON(w, map[string]any{"server": u.Server, "user": u.User, "permissions": u.Permissions})
		return
	}
	writeErr(w, http.StatusForbidden, "HttpForbiddenException", "Authorization credentials were not correct, please try again.")
}
