// Package configure implements `wharf configure`: it fetches a node's
// configuration from the panel's application API and writes the
// configuration file, as `wings configure` does.
package configure

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/config"
)

// Options are the flags of `wharf configure`.
type Options struct {
	PanelURL string // the panel's base URL
	Token    string // an application API key; never printed
	Node     string // the node's numeric id in the panel
	Path     string // where to write the configuration
	Override bool   // replace an existing file
	// AllowInsecure skips the verification of the panel's TLS certificate
	// and allows a plain http:// panel URL.
	AllowInsecure bool
	// Client is used for the request when set (tests).
	Client *http.Client
}

// Errors a user sees, one line each.
var (
	ErrExists       = errors.New("a configuration file already exists there; pass --override to replace it")
	ErrUnauthorized = errors.New("the panel refused the API key (401): --token must be an application API key (Admin > Application API) that still exists")
	ErrForbidden    = errors.New("the API key may not read nodes (403): give the application API key read access to Nodes")
	ErrNoNode       = errors.New("the panel has no such node (404): --node is the number in the node's URL in the admin area")
)

// requestTimeout bounds the call to the panel.
const requestTimeout = 30 * time.Second

// Run fetches the configuration of the node and writes it to opts.Path
// atomically with mode 0600. It returns the configuration written.
func Run(ctx context.Context, opts Options) (*config.Config, error) {
	endpoint, err := opts.endpoint()
	if err != nil {
		return nil, err
	}
	if !opts.Override {
		if _, err := os.Lstat(opts.Path); err == nil {
			return nil, fmt.Errorf("%s: %w", opts.Path, ErrExists)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	body, err := opts.fetch(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	c := config.Defaults()
	if err := json.Unmarshal(body, c); err != nil {
		return nil, fmt.Errorf("the panel's answer is not a node configuration: %v", err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("the panel's configuration is not valid: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(opts.Path), 0o755); err != nil {
		return nil, err
	}
	if err := c.Save(opts.Path); err != nil {
		return nil, err
	}
	return c, nil
}

func (o Options) endpoint() (string, error) {
	switch {
	case o.PanelURL == "":
		return "", errors.New("--panel-url is required")
	case o.Token == "":
		return "", errors.New("--token is required (an application API key)")
	case o.Node == "":
		return "", errors.New("--node is required (the node's id in the panel)")
	case o.Path == "":
		return "", errors.New("--config-path is required")
	}
	for _, r := range o.Node {
		if r < '0' || r > '9' {
			return "", fmt.Errorf("--node must be the node's numeric id, got %q", o.Node)
		}
	}
	u, err := url.Parse(o.PanelURL)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", fmt.Errorf("--panel-url must be an http(s) URL such as https://panel.example.com, got %q", o.PanelURL)
	}
	if u.Scheme == "http" && !o.AllowInsecure {
		return "", errors.New("--panel-url is plain http: the API key would travel in clear; use https, or pass --allow-insecure")
	}
	return strings.TrimRight(u.String(), "/") + "/api/application/nodes/" + o.Node + "/configuration", nil
}

func (o Options) fetch(ctx context.Context, endpoint string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+o.Token)
	req.Header.Set("Accept", "application/vnd.pterodactyl.v1+json")
	req.Header.Set("User-Agent", "wharf-configure")
	client := o.Client
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if o.AllowInsecure {
			tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the operator asked for it
		}
		client = &http.Client{Transport: tr}
	}
	res, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL holds no secret, but the message reads better without it
		}
		return nil, fmt.Errorf("could not reach the panel at %s: %v", o.PanelURL, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the panel's answer: %v", err)
	}
	switch res.StatusCode {
	case http.StatusOK:
		return body, nil
	case http.StatusUnauthorized:
		return nil, ErrUnauthorized
	case http.StatusForbidden:
		return nil, ErrForbidden
	case http.StatusNotFound:
		return nil, fmt.Errorf("node %s: %w", o.Node, ErrNoNode)
	}
	return nil, fmt.Errorf("the panel answered %s to GET %s", res.Status, endpoint)
}
