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

	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/transfer"
)

type transferRequest struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// postTransfer starts an outgoing transfer: 202, then the server streams in
// the background.
func (a *API) postTransfer(w http.ResponseWriter, r *http.Request, s *server.Server) {
	var req transferRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	u, err := url.Parse(req.URL)
	if req.URL == "" || req.Token == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		writeError(w, r, http.StatusUnprocessableEntity, "The data provided in the request could not be validated: url (an http or https URL) and token are required.")
		return
	}
	if _, err := a.Transfers.Send(s, req.URL, req.Token); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// deleteTransfer cancels an outgoing transfer.
func (a *API) deleteTransfer(w http.ResponseWriter, r *http.Request, s *server.Server) {
	if err := a.Transfers.Outgoing.Cancel(s.UUID()); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// deleteIncomingTransfer cancels an incoming transfer. The server need not
// be registered: an unknown server is simply not being transferred (409).
func (a *API) deleteIncomingTransfer(w http.ResponseWriter, r *http.Request) {
	if err := a.Transfers.Incoming.Cancel(r.PathValue("server")); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// getTransfers answers a source's question before a transfer: the live
// transfers this node speaks (docs/live-transfers.md). A node with live
// transfers off answers 404, as a node that never heard of them would.
// The transfer JWT is checked as for the POST, without using it up.
func (a *API) getTransfers(w http.ResponseWriter, r *http.Request) {
	if a.Transfers == nil || !a.Transfers.LiveEnabled() {
		writeError(w, r, http.StatusNotFound, "The requested resource does not exist on this instance.")
		return
	}
	scheme, raw, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || scheme != "Bearer" || raw == "" {
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeError(w, r, http.StatusUnauthorized, "The required authorization heads were not present in the request.")
		return
	}
	if _, err := a.Tokens.Transfer(raw); err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(transfer.LiveOffer())
}

// postTransfers receives a server from a source node. The transfer JWT is
// in "Authorization: Bearer"; only a transfer-purpose token is accepted.
func (a *API) postTransfers(w http.ResponseWriter, r *http.Request) {
	scheme, raw, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || scheme != "Bearer" || raw == "" {
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeError(w, r, http.StatusUnauthorized, "The required authorization heads were not present in the request.")
		return
	}
	claims, err := a.Tokens.Transfer(raw)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	liftBodyDeadline(w)
	if _, busy := a.Transfers.Incoming.Get(claims.ServerUUID); busy {
		a.fail(w, r, transfer.ErrInProgress)
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == transfer.LiveContentType && a.Transfers.LiveEnabled() {
		a.postLiveTransfer(w, r, claims.ServerUUID)
		return
	}
	mr, err := multipartReader(r)
	if err != nil {
		writeError(w, r, http.StatusBadRequest, "The request must be a multipart form holding the archive and its checksum.")
		return
	}
	rc := http.NewResponseController(w)
	// A cancel breaks a read that waits on a stalled source.
	unblock := func() { _ = rc.SetReadDeadline(time.Now()) }
	if err := a.Transfers.Receive(r.Context(), claims.ServerUUID, mr, unblock); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
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
func (a *API) postLiveTransfer(w http.ResponseWriter, r *http.Request, id string) {
	if r.Header.Get(transfer.LiveVersionHeader) != strconv.Itoa(transfer.LiveVersion) {
		writeError(w, r, http.StatusBadRequest, "Unsupported live transfer version.")
		return
	}
	rc := http.NewResponseController(w)
	unblock := func() { _ = rc.SetReadDeadline(time.Now()) }
	if err := a.Transfers.ReceiveLive(r.Context(), id, r.Body, unblock); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}
