package diagnostics

import (
	"net"
	"net/url"
	"strconv"

	"github.com/wharf/wharf/internal/config"
)

// hideEndpointsIn blanks the node's addresses in the configuration shown.
// Ports are numbers: 0 stands for a hidden one.
func hideEndpointsIn(c *config.Config) {
	hide := func(s *string) {
		if *s != "" {
			*s = RedactedEndpoint
		}
	}
	hide(&c.Remote)
	hide(&c.API.Host)
	c.API.Port = 0
	hide(&c.System.SFTP.BindAddress)
	c.System.SFTP.BindPort = 0
	hide(&c.Metrics.BindAddress)
	hide(&c.System.Backups.Repository.S3.Endpoint)
}

// endpoints are the address values that hideEndpointsIn blanks in the
// configuration, as text to replace wherever else they appear (the panel
// check, log lines): URLs whole and by host name, and host:port pairs.
// Wildcard hosts (0.0.0.0, ::) say nothing about the node and stay.
func endpoints(c *config.Config) []string {
	var out []string
	addURL := func(raw string) {
		if raw == "" {
			return
		}
		out = append(out, raw)
		if u, err := url.Parse(raw); err == nil && u.Hostname() != "" {
			out = append(out, u.Host, u.Hostname())
		}
	}
	addHost := func(host string, port int) {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			return
		}
		out = append(out, host)
		if port > 0 {
			out = append(out, net.JoinHostPort(host, strconv.Itoa(port)))
		}
	}
	addURL(c.Remote)
	addURL(c.System.Backups.Repository.S3.Endpoint)
	addHost(c.API.Host, c.API.Port)
	addHost(c.System.SFTP.BindAddress, c.System.SFTP.BindPort)
	if host, port, err := net.SplitHostPort(c.Metrics.BindAddress); err == nil {
		p, _ := strconv.Atoi(port)
		addHost(host, p)
	}
	// Longest first, so that a URL is replaced whole before its host is.
	sortLongestFirst(out)
	return out
}

func sortLongestFirst(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && len(s[j]) > len(s[j-1]); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
