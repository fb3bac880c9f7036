package httpapi

import (
	"bufio"
	"encoding/json"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/ids"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/transfer"
	"github.com/wharf/wharf/internal/usererr"
)

type transferRequest struct {
	URL   string `json:"url"`
	Token string `json:"token"`
	// Backups are the UUIDs of the backups to send along (Pelican's
	// TransferServerService; Pterodactyl sends none).
	Backups []string `json:"backups"`
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
	for _, b := range req.Backups {
		if !ids.IsUUID(b) {
			return errBadTransferBackups
		}
	}
	if _, err := a.Transfers.Send(s, req.URL, req.Token, req.Backups); err != nil {
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

// getTransfers answers a source's question before a transfer: the live
// transfers this node speaks (docs/live-transfers.md). A node with live
// transfers off answers 404, as a node that never heard of them would.
// The transfer JWT is checked as for the POST, without using it up.
func (a *API) getTransfers(w http.ResponseWriter, r *http.Request) error {
	if a.Transfers == nil || !a.Transfers.Answers(r.Context()) {
		return errNoResource
	}
	raw, err := bearerToken(r)
	if err != nil {
		return err
	}
	if _, err := a.Tokens.Transfer(raw); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(a.Transfers.Offer(r.Context()))
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
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == transfer.LiveContentType && a.Transfers.LiveEnabled() {
		return a.postLiveTransfer(w, r, claims.ServerUUID)
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

// postLiveTransfer receives a live stream (the source asked first).
func (a *API) postLiveTransfer(w http.ResponseWriter, r *http.Request, id string) error {
	version, err := strconv.Atoi(r.Header.Get(transfer.LiveVersionHeader))
	if err != nil || !transfer.SpeaksLive(version) {
		return errLiveVersion
	}
	rc := http.NewResponseController(w)
	unblock := func() { _ = rc.SetReadDeadline(time.Now()) }
	// A stream by manifest (version 5) is told to go on once the snapshot
	// is restored: an informational answer, the body still being read.
	restored := func() {
		w.Header().Set(transfer.LiveRestoredHeader, "1")
		w.WriteHeader(http.StatusProcessing)
		w.Header().Del(transfer.LiveRestoredHeader)
	}
	if err := a.Transfers.ReceiveLive(r.Context(), id, version, r.Body, unblock, restored); err != nil {
		// The answer goes at once: the server would first read up to 256
		// KiB more of the body, which a source waiting for the restore
		// (version 5) does not send.
		unblock()
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// errBadTransferBackups: a backup to send along that is not a UUID.
var errBadTransferBackups = usererr.New(usererr.Unprocessable, "The data provided in the request could not be validated: backups must be backup UUIDs.")

// errLiveVersion: a live stream of a wire version this node does not speak.
var errLiveVersion = usererr.New(usererr.Invalid, "Unsupported live transfer version.")
