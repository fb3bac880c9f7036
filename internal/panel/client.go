// Package panel is the client for the backend's remote API (the outbound
// calls the daemon makes), with its wire types.
package panel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/wharf/wharf/internal/metrics"
	"golang.org/x/sync/errgroup"
)

// Settings are read before every call, so that a configuration update
// (new token, new timeout) takes effect at once.
type Settings struct {
	Remote  string // backend base URL, without /api/remote
	TokenID string
	Token   string
	Timeout time.Duration
	// Headers are sent on every call (remote_query.custom_headers: an
	// access proxy's credentials). They never override the headers the
	// daemon sets itself, and are never logged.
	Headers map[string]string
}

// Client calls the backend.
type Client struct {
	settings  func() Settings
	http      *http.Client
	userAgent string
	metrics   *metrics.Metrics // nil: failed calls are not counted
}

// New returns a client. version goes into the User-Agent.
func New(settings func() Settings, version string) *Client {
	return &Client{
		settings:  settings,
		http:      &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
		userAgent: "Wharf/" + version,
	}
}

// WithMetrics counts the client's failed calls in m (the daemon's
// collectors); call it before the client is shared.
func (c *Client) WithMetrics(m *metrics.Metrics) *Client {
	c.metrics = m
	return c
}

// RequestError is a non-2xx answer from the backend.
type RequestError struct {
	Method string
	Path   string
	Status int
	Code   string
	Detail string
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("panel: %s %s: HTTP %d: %s: %s", e.Method, e.Path, e.Status, e.Code, e.Detail)
}

// IsNotFound reports whether err is a 404 from the backend.
func IsNotFound(err error) bool {
	var re *RequestError
	return errors.As(err, &re) && re.Status == http.StatusNotFound
}

// do sends one logical request: transport errors and 5xx (and 3xx) answers are
// retried with exponential backoff within the configured timeout; 4xx answers
// are returned at once. out, when not nil, receives the decoded JSON answer.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	s := c.settings()
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// Calls without a body still send JSON null, as the panels expect.
	payload, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("panel: encode %s: %w", path, err)
	}
	u := strings.TrimRight(s.Remote, "/") + "/api/remote" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}

	op := func() (struct{}, error) {
		req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(payload))
		if err != nil {
			return struct{}{}, backoff.Permanent(err)
		}
		req.Header.Set("Authorization", "Bearer "+s.TokenID+"."+s.Token)
		req.Header.Set("Accept", "application/vnd.pterodactyl.v1+json")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", c.userAgent+" (id:"+s.TokenID+")")
		setCustomHeaders(req.Header, s.Headers)
		res, err := c.http.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return struct{}{}, backoff.Permanent(fmt.Errorf("panel: %s %s: %w", method, path, ctx.Err()))
			}
			return struct{}{}, fmt.Errorf("panel: %s %s: %w", method, path, redactURL(err))
		}
		defer res.Body.Close()
		if res.StatusCode < 200 || res.StatusCode >= 300 {
			rerr := decodeError(method, path, res)
			if res.StatusCode >= 400 && res.StatusCode < 500 {
				return struct{}{}, backoff.Permanent(rerr)
			}
			return struct{}{}, rerr
		}
		if out == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
			return struct{}{}, nil
		}
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			return struct{}{}, backoff.Permanent(fmt.Errorf("panel: %s %s: invalid JSON answer: %w", method, path, err))
		}
		return struct{}{}, nil
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 500 * time.Millisecond
	b.MaxInterval = 5 * time.Second
	_, err = backoff.Retry(ctx, op, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(timeout))
	if err != nil {
		status := 0
		var re *RequestError
		if errors.As(err, &re) {
			status = re.Status
		}
		c.metrics.PanelError(status)
	}
	return err
}

// ownHeaders are set by the client itself; custom headers never replace
// them (as Pelican Wings' remote/http.go).
var ownHeaders = map[string]bool{"Authorization": true, "Accept": true, "Content-Type": true, "User-Agent": true}

func setCustomHeaders(h http.Header, custom map[string]string) {
	for name, value := range custom {
		if !ownHeaders[http.CanonicalHeaderKey(name)] {
			h.Set(name, value)
		}
	}
}

// redactURL strips the URL from transport errors; it holds nothing secret
// today, but keeping errors short keeps logs readable.
func redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func decodeError(method, path string, res *http.Response) error {
	e := &RequestError{Method: method, Path: path, Status: res.StatusCode}
	var body struct {
		Errors []struct {
			Code   string `json:"code"`
			Status string `json:"status"`
			Detail string `json:"detail"`
		} `json:"errors"`
	}
	data, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if json.Unmarshal(data, &body) == nil && len(body.Errors) > 0 {
		e.Code = body.Errors[0].Code
		e.Detail = body.Errors[0].Detail
	} else {
		e.Code = "_MissingResponseCode"
		e.Detail = "No error response returned from API endpoint."
	}
	return e
}

// ServersPage fetches one page of the servers assigned to this node.
func (c *Client) ServersPage(ctx context.Context, page, perPage int) (ServerListPage, error) {
	var out ServerListPage
	q := url.Values{"page": {strconv.Itoa(page)}, "per_page": {strconv.Itoa(perPage)}}
	err := c.do(ctx, http.MethodGet, "/servers", q, nil, &out)
	return out, err
}

// AllServers fetches every server, the pages after the first with at most
// concurrency requests in flight.
func (c *Client) AllServers(ctx context.Context, perPage, concurrency int) ([]RawServer, error) {
	first, err := c.ServersPage(ctx, 0, perPage)
	if err != nil {
		return nil, err
	}
	all := append([]RawServer(nil), first.Data...)
	if first.Meta.LastPage <= 1 || first.Meta.CurrentPage >= first.Meta.LastPage {
		return all, nil
	}
	// The panel counts pages from 1 and answers page 0 as page 1.
	start := int(first.Meta.CurrentPage) + 1
	last := int(first.Meta.LastPage)
	pages := make([][]RawServer, last-start+1)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, concurrency))
	for p := start; p <= last; p++ {
		g.Go(func() error {
			res, err := c.ServersPage(gctx, p, perPage)
			if err != nil {
				return err
			}
			pages[p-start] = res.Data
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, p := range pages {
		all = append(all, p...)
	}
	return all, nil
}

// ResetServersState tells the backend the node booted, so that servers stuck
// installing or restoring on its side are reset.
func (c *Client) ResetServersState(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/servers/reset", nil, nil, nil)
}

// ServerConfiguration fetches one server's configuration.
func (c *Client) ServerConfiguration(ctx context.Context, uuid string) (ServerConfiguration, error) {
	var out ServerConfiguration
	err := c.do(ctx, http.MethodGet, "/servers/"+url.PathEscape(uuid), nil, nil, &out)
	return out, err
}

// InstallationScript fetches a server's install script.
func (c *Client) InstallationScript(ctx context.Context, uuid string) (InstallationScript, error) {
	var out InstallationScript
	err := c.do(ctx, http.MethodGet, "/servers/"+url.PathEscape(uuid)+"/install", nil, nil, &out)
	return out, err
}

// SetInstallationStatus reports the end of an install or reinstall.
func (c *Client) SetInstallationStatus(ctx context.Context, uuid string, successful, reinstall bool) error {
	body := map[string]bool{"successful": successful, "reinstall": reinstall}
	return c.do(ctx, http.MethodPost, "/servers/"+url.PathEscape(uuid)+"/install", nil, body, nil)
}

// SetTransferStatus reports the end of a transfer.
func (c *Client) SetTransferStatus(ctx context.Context, uuid string, successful bool) error {
	outcome := "failure"
	if successful {
		outcome = "success"
	}
	return c.do(ctx, http.MethodPost, "/servers/"+url.PathEscape(uuid)+"/transfer/"+outcome, nil, nil, nil)
}

// BackupUploadURLs asks for presigned part URLs for a remote backup of size bytes.
func (c *Client) BackupUploadURLs(ctx context.Context, backup string, size int64) (BackupUploadURLs, error) {
	var out BackupUploadURLs
	q := url.Values{"size": {strconv.FormatInt(size, 10)}}
	err := c.do(ctx, http.MethodGet, "/backups/"+url.PathEscape(backup), q, nil, &out)
	return out, err
}

// SetBackupStatus reports the end of a backup.
func (c *Client) SetBackupStatus(ctx context.Context, backup string, status BackupStatus) error {
	return c.do(ctx, http.MethodPost, "/backups/"+url.PathEscape(backup), nil, status, nil)
}

// SetRestoreStatus reports the end of a restore.
func (c *Client) SetRestoreStatus(ctx context.Context, backup string, successful bool) error {
	body := map[string]bool{"successful": successful}
	return c.do(ctx, http.MethodPost, "/backups/"+url.PathEscape(backup)+"/restore", nil, body, nil)
}

// ContainerStatus is the body of a state push: the state left and the state
// entered (Pelican Wings' remote.ServerStateChange; the panel reads
// data.new_state).
type ContainerStatus struct {
	PreviousState string `json:"previous_state"`
	NewState      string `json:"new_state"`
}

// PushContainerStatus tells the panel a server changed state (Pelican:
// POST /api/remote/servers/{uuid}/container/status, which the panel caches
// for an hour and shows without polling the node). Pterodactyl has no such
// route and answers 404.
func (c *Client) PushContainerStatus(ctx context.Context, uuid string, st ContainerStatus) error {
	return c.do(ctx, http.MethodPost, "/servers/"+url.PathEscape(uuid)+"/container/status", nil, map[string]any{"data": st}, nil)
}

// IsRouteMissing reports whether err is the panel's answer to a route it
// does not have (404 or 405).
func IsRouteMissing(err error) bool {
	var re *RequestError
	return errors.As(err, &re) && (re.Status == http.StatusNotFound || re.Status == http.StatusMethodNotAllowed)
}

// SendActivity delivers a batch of activity records.
func (c *Client) SendActivity(ctx context.Context, batch []Activity) error {
	return c.do(ctx, http.MethodPost, "/activity", nil, map[string]any{"data": batch}, nil)
}

// ValidateSFTPCredentials asks the backend whether an SFTP login is valid.
func (c *Client) ValidateSFTPCredentials(ctx context.Context, req SFTPAuthRequest) (SFTPAuthResponse, error) {
	var out SFTPAuthResponse
	err := c.do(ctx, http.MethodPost, "/sftp/auth", nil, req, &out)
	return out, err
}
