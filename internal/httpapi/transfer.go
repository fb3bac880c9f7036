package httpapi

import (
	"bufio"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/transfer"
)

type transferRequest struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// postTransfer starts an outgoing transfer: 202, then the server streams in
// the background.
func (a *API) postTransfer(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	var req transferRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	u, err := url.Parse(req.URL)
	if req.URL == "" || req.Token == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errBadTransfer
	}
	if _, err := a.Transfers.Send(s, req.URL, req.Token); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// deleteTransfer cancels an outgoing transfer.
func (a *API) deleteTransfer(w http.ResponseWriter, r *http.Request, s *server.Server) error {
	if err := a.Transfers.Outgoing.Cancel(s.UUID()); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// deleteIncomingTransfer cancels an incoming transfer. The server need not
// be registered: an unknown server is simply not being transferred (409).
func (a *API) deleteIncomingTransfer(w http.ResponseWriter, r *http.Request) error {
	if err := a.Transfers.Incoming.Cancel(r.PathValue("server")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// postTransfers receives a server from a source node. The transfer JWT is
// in "Authorization: Bearer"; only a transfer-purpose token is accepted.
func (a *API) postTransfers(w http.ResponseWriter, r *http.Request) error {
	raw, err := bearerToken(r)
	if err != nil {
		return err
	}
	claims, err := a.Tokens.Transfer(raw)
	if err != nil {
		return err
	}
	liftBodyDeadline(w)
	if _, busy := a.Transfers.Incoming.Get(claims.ServerUUID); busy {
		return transfer.ErrInProgress
	}
	mr, err := multipartReader(r)
	if err != nil {
		return errTransferForm
	}
	rc := http.NewResponseController(w)
	// A cancel breaks a read that waits on a stalled source.
	unblock := func() { _ = rc.SetReadDeadline(time.Now()) }
	if err := a.Transfers.Receive(r.Context(), claims.ServerUUID, mr, unblock); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// multipartReader reads the form through a large buffer: the multipart
// reader's own 4 KiB buffer would cost a read call per 4 KiB of archive.
func multipartReader(r *http.Request) (*multipart.Reader, error) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mt, "multipart/") || params["boundary"] == "" {
		return nil, http.ErrNotMultipart
	}
	return multipart.NewReader(bufio.NewReaderSize(r.Body, 1<<20), params["boundary"]), nil
}
