package httpapi

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/tokens"
	"github.com/wharf/wharf/internal/usererr"
)

var (
	errNoInstallLog = usererr.New(usererr.NotFound, "This server has no installation log on this node.")
	errBadJTI       = usererr.New(usererr.Invalid, "Each entry of jtis must be a non-empty string of at most 256 bytes.")
)

// maxInstallLog bounds what GET install-logs answers: the end of a longer
// log (an install script may print without end).
const maxInstallLog = 8 << 20

// The headers after which the script's own output starts: Wharf's
// (server.writeInstallLog), and Pelican Wings', whose endpoint answers only
// what follows it (router/router_server.go getServerInstallLogs); a log
// without either is answered whole.
var installOutputMarks = [][]byte{
	[]byte("\nScript output:\n"),
	[]byte("| Script Output\n| ------------------------------\n"),
}

type installLog struct {
	Data string `json:"data"`
}

// getInstallLogs is GET /api/servers/{s}/install-logs (Pelican's admin
// install-log viewer, EditServer.php: it reads `data` and shows an empty
// log on any error answer). No log: 404 (Pelican Wings answers 500).
func (a *API) getInstallLogs(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	path := filepath.Join(a.Config.Get().System.LogDirectory, "install", s.UUID()+".log")
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return errNoInstallLog
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return errNoInstallLog
	}
	if st.Size() > maxInstallLog {
		if _, err := f.Seek(st.Size()-maxInstallLog, io.SeekStart); err != nil {
			return err
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxInstallLog))
	if err != nil {
		return err
	}
	for _, mark := range installOutputMarks {
		if _, after, ok := bytes.Cut(data, mark); ok {
			data = after
			break
		}
	}
	writeJSON(w, http.StatusOK, installLog{Data: string(bytes.ToValidUTF8(data, []byte("\uFFFD")))})
	return nil
}

type wsDenyRequest struct {
	JTIs []string `json:"jtis"`
}

// postWSDeny is POST /api/servers/{s}/ws/deny, which Pterodactyl panels up
// to 1.11 call when a subuser is removed or changed, or the owner changes
// (DaemonServerRepository::revokeJTIs). As Wings (router/router_server.go
// postServerDenyWSTokens, router/tokens/websocket.go): the websocket tokens
// carrying one of the jtis issued until now are refused, at authentication
// and on every message, and a token with the same jti issued later is
// accepted; Wharf also closes the open sockets that carry them. 204.
func (a *API) postWSDeny(w http.ResponseWriter, r *http.Request, _ *server.Server) error {
	var req wsDenyRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	for _, j := range req.JTIs {
		if j == "" || len(j) > tokens.MaxJTILength {
			return errBadJTI
		}
	}
	if len(req.JTIs) > 0 {
		now := time.Now()
		a.Denylist.DenyJTIs(req.JTIs, now)
		closed := 0
		if a.Websockets != nil {
			closed = a.Websockets.CloseJTIs(req.JTIs, now)
		}
		a.Log.Info("websocket token ids denied", "jtis", len(req.JTIs), "sockets_closed", closed)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
