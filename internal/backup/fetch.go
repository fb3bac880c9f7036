package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/netguard"
)

// Restore download timeouts: connecting and the answer's headers are
// bounded; the body streams as long as it takes.
const (
	dialTimeout    = 10 * time.Second
	headersTimeout = 60 * time.Second
	maxRedirects   = 10
)

// blocked are the address ranges a restore download may not reach, unless
// allowed: loopback, link-local (cloud metadata), CGNAT, benchmark,
// multicast and unspecified. Private LAN ranges are allowed.
var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("255.255.255.255/32"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
}

// allowlist is the backend's own host plus system.backups.restore_host_allowlist.
type allowlist struct {
	hosts    map[string]bool // allowlisted host names, any port
	origin   string          // the backend's own host:port
	prefixes []netip.Prefix
}

func newAllowlist(remote string, entries []string) *allowlist {
	a := &allowlist{hosts: map[string]bool{}}
	add := func(e string) {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" {
			return
		}
		if p, err := netip.ParsePrefix(e); err == nil {
			a.prefixes = append(a.prefixes, p.Masked())
			return
		}
		if ip, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
			ip = ip.Unmap()
			a.prefixes = append(a.prefixes, netip.PrefixFrom(ip, ip.BitLen()))
			return
		}
		a.hosts[strings.TrimSuffix(e, ".")] = true
	}
	if u, err := url.Parse(remote); err == nil && u.Hostname() != "" {
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		a.origin = net.JoinHostPort(strings.ToLower(strings.TrimSuffix(u.Hostname(), ".")), port)
	}
	for _, e := range entries {
		add(e)
	}
	return a
}

func (a *allowlist) allowsIP(ip netip.Addr) bool {
	for _, p := range a.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// checkAddr is the dial-time check on the address actually connected to.
func (a *allowlist) checkAddr(hostAllowed bool, ip netip.Addr) error {
	ip = ip.Unmap()
	if hostAllowed || a.allowsIP(ip) {
		return nil
	}
	for _, p := range blocked {
		if p.Contains(ip) {
			return &DownloadError{Reason: "the address " + ip.String() + " may not be used for a restore"}
		}
	}
	return nil
}

// client returns the HTTP client for restore downloads.
func (a *allowlist) client() *http.Client {
	dial := netguard.DialContext(dialTimeout, func(host, port string, ip netip.Addr) error {
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		hostAllowed := a.hosts[host] || (a.origin != "" && net.JoinHostPort(host, port) == a.origin)
		return a.checkAddr(hostAllowed, ip)
	})
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil, // a proxy would hide the address dialled
			DialContext:           dial,
			TLSHandshakeTimeout:   dialTimeout,
			ResponseHeaderTimeout: headersTimeout,
			ForceAttemptHTTP2:     true,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return &DownloadError{Reason: "too many redirects"}
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return &DownloadError{Reason: "redirect to a scheme other than http or https"}
			}
			return nil
		},
	}
}

// download opens the restore URL up to its headers: http or https only,
// status 200, Content-Type application/x-gzip or application/gzip. The
// caller reads and closes the body.
func (s *Service) download(ctx context.Context, raw string) (io.ReadCloser, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &DownloadError{Reason: "download_url must be an http or https URL"}
	}
	cfg := s.cfg.Get()
	client := newAllowlist(cfg.Remote, cfg.System.Backups.RestoreHostAllowlist).client()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, &DownloadError{Reason: "bad download_url"}
	}
	res, err := client.Do(req)
	if err != nil {
		var de *DownloadError
		if errors.As(err, &de) {
			return nil, de
		}
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // keep the signed query out of the message
		}
		return nil, &DownloadError{Reason: "request to " + safeURL(raw) + " failed: " + err.Error()}
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		return nil, &DownloadError{Reason: fmt.Sprintf("the server answered status %d", res.StatusCode)}
	}
	ct := res.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/x-gzip" && mt != "application/gzip") {
		res.Body.Close()
		return nil, &DownloadError{Reason: fmt.Sprintf("%q is not application/x-gzip or application/gzip", ct)}
	}
	return res.Body, nil
}
