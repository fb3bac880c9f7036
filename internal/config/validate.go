package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// ValidationError names the key that is wrong and why.
type ValidationError struct {
	Key    string
	Reason string
}

// maxCrashActivityLines bounds the console lines one activity carries to the
// panel (each line is at most the console's line length).
const maxCrashActivityLines = 100

func (e *ValidationError) Error() string {
	return fmt.Sprintf("config: %s: %s", e.Key, e.Reason)
}

// badFunc reports one problem: the key that is wrong and why.
type badFunc func(key, reason string)

// Validate checks the configuration and returns every problem found, joined.
// Each section has its validator, called in the order its problems are
// reported; a new section adds its own (func(c *Config, bad badFunc), in
// its own file when it is large) to this list.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, reason string) { errs = append(errs, &ValidationError{Key: key, Reason: reason}) }
	for _, validate := range []func(c *Config, bad badFunc){
		validateNode,
		validateAPI,
		validateAllowedOrigins,
		validateSystem,
		validateMetrics,
		validateSFTP,
		validateDecompress,
		validateBackups,
		validateTransfers,
		validateRemoteQuery,
		validateThrottles,
		validateDocker,
		func(c *Config, bad badFunc) { validateTesting(c.Testing, bad) },
	} {
		validate(c, bad)
	}
	return errors.Join(errs...)
}

// validateNode checks what identifies the node and its backend.
func validateNode(c *Config, bad badFunc) {
	required := []struct{ key, val string }{
		{"uuid", c.UUID}, {"token_id", c.TokenID}, {"token", c.Token}, {"remote", c.Remote},
	}
	for _, r := range required {
		if strings.TrimSpace(r.val) == "" {
			bad(r.key, "is required")
		}
	}
	if c.Remote != "" {
		if err := validateHTTPURL(c.Remote); err != nil {
			bad("remote", err.Error())
		}
	}
}

func validateAPI(c *Config, bad badFunc) {
	if c.API.Port < 1 || c.API.Port > 65535 {
		bad("api.port", fmt.Sprintf("must be between 1 and 65535, got %d", c.API.Port))
	}
	if c.API.Host != "" && net.ParseIP(c.API.Host) == nil && c.API.Host != "localhost" {
		bad("api.host", "must be an IP address")
	}
	if c.API.UploadLimit < 1 {
		bad("api.upload_limit", "must be at least 1 (MB)")
	}
	if c.API.RemoteDownload.MaxRedirects < 0 || c.API.RemoteDownload.MaxRedirects > 20 {
		bad("api.remote_download.max_redirects", "must be between 0 and 20")
	}
	if c.API.SSL.Enabled {
		if c.API.SSL.Cert == "" {
			bad("api.ssl.cert", "is required when api.ssl.enabled is true")
		}
		if c.API.SSL.Key == "" {
			bad("api.ssl.key", "is required when api.ssl.enabled is true")
		}
	}
	for i, p := range c.API.TrustedProxies {
		if _, err := netip.ParsePrefix(p); err != nil {
			if _, err := netip.ParseAddr(p); err != nil {
				bad(fmt.Sprintf("api.trusted_proxies[%d]", i), "must be an IP address or CIDR")
			}
		}
	}
}

func validateAllowedOrigins(c *Config, bad badFunc) {
	for i, o := range c.AllowedOrigins {
		if o == "*" {
			continue
		}
		if err := validateHTTPURL(o); err != nil {
			bad(fmt.Sprintf("allowed_origins[%d]", i), err.Error())
		}
	}
}

// validateSystem checks the system section's own keys; its subsections
// (sftp, decompress, backups, transfers) have their validators.
func validateSystem(c *Config, bad badFunc) {
	dirs := []struct{ key, val string }{
		{"system.root_directory", c.System.RootDirectory},
		{"system.log_directory", c.System.LogDirectory},
		{"system.data", c.System.Data},
		{"system.archive_directory", c.System.ArchiveDirectory},
		{"system.backup_directory", c.System.BackupDirectory},
		{"system.tmp_directory", c.System.TmpDirectory},
	}
	for _, d := range dirs {
		if !strings.HasPrefix(d.val, "/") {
			bad(d.key, "must be an absolute path")
		}
	}
	if c.System.Username == "" {
		bad("system.username", "is required")
	}
	validateDiskChecks(c.System, bad)
	if f := c.System.LogFormat; f != "" && f != "text" && f != "json" {
		bad("system.log_format", "must be text or json")
	}
	if c.System.Timezone != "" {
		if _, err := time.LoadLocation(c.System.Timezone); err != nil {
			bad("system.timezone", "is not a known time zone")
		}
	}
	if d := c.System.User.Passwd.Directory; d != "" && !filepath.IsAbs(d) {
		bad("system.user.passwd.directory", "must be an absolute path (or empty: <root_directory>/etc)")
	}
	if d := c.System.MachineID.Directory; d != "" && !filepath.IsAbs(d) {
		bad("system.machine_id.directory", "must be an absolute path (or empty: <root_directory>/machine-id)")
	}
	if c.System.WebsocketLogCount < 0 {
		bad("system.websocket_log_count", "must not be negative")
	}
	for i, ip := range c.Docker.SystemIPs {
		if net.ParseIP(ip) == nil {
			bad(fmt.Sprintf("docker.system_ips[%d]", i), "must be an IP address")
		}
	}
	if c.System.CrashDetection.Timeout < 0 {
		bad("system.crash_detection.timeout", "must not be negative")
	}
	if n := c.System.CrashActivityLines; n < 0 || n > maxCrashActivityLines {
		bad("system.crash_detection_activity_lines", fmt.Sprintf("must be between 0 and %d", maxCrashActivityLines))
	}
}

func validateMetrics(c *Config, bad badFunc) {
	if addr := c.Metrics.BindAddress; addr != "" {
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			bad("metrics.bind_address", "must be host:port, such as 127.0.0.1:9101")
		}
		if len(c.Metrics.Token) < 16 {
			bad("metrics.token", "must be at least 16 characters when metrics.bind_address is set (scrapers send it as a bearer token)")
		}
	}
}

func validateSFTP(c *Config, bad badFunc) {
	if c.System.SFTP.BindPort < 1 || c.System.SFTP.BindPort > 65535 {
		bad("system.sftp.bind_port", "must be between 1 and 65535")
	}
	validateSFTPLimits(c.System.SFTP, bad)
}

func validateDecompress(c *Config, bad badFunc) {
	if c.System.Decompress.MemoryLimit < 256 {
		bad("system.decompress.memory_limit", "must be at least 256 (MiB)")
	}
	if c.System.Decompress.CPULimit < 1 {
		bad("system.decompress.cpu_limit", "must be at least 1 (second)")
	}
	if c.System.Decompress.Timeout < 1 {
		bad("system.decompress.timeout", "must be at least 1 (second)")
	}
}

func validateBackups(c *Config, bad badFunc) {
	if c.System.Backups.WriteLimit < 0 {
		bad("system.backups.write_limit", "must not be negative")
	}
	switch c.System.Backups.CompressionLevel {
	case "none", "best_speed", "best_compression":
	default:
		bad("system.backups.compression_level", "must be one of none, best_speed, best_compression")
	}
	if n := c.System.Backups.ObjectStorePartsOnDisk; n < 1 || n > 64 {
		bad("system.backups.object_store_parts_on_disk", "must be from 1 to 64")
	}
	switch c.System.Backups.Layout {
	case "", "auto", "flat", "per_server":
	default:
		bad("system.backups.layout", "must be one of auto, flat, per_server")
	}
	validateBackupDownloads(c.System.Backups.Downloads, bad)
	validateBrowseDirectory(c.System.Backups.BrowseDirectory, bad)
}

func validateTransfers(c *Config, bad badFunc) {
	c.validateBackupFormat(bad)
	switch c.System.Transfers.Compression {
	case "", "auto", "zstd", "none":
	default:
		bad("system.transfers.compression", "must be one of auto, zstd, none")
	}
	if c.System.Transfers.MaxBackups < 0 {
		bad("system.transfers.max_backups", "must be 0 (no backups accepted) or more")
	}
	if c.System.Transfers.MaxBackupSize < 0 {
		bad("system.transfers.max_backup_size", "must be 0 (the server's disk limit) or more (MiB)")
	}
}

func validateRemoteQuery(c *Config, bad badFunc) {
	if c.RemoteQuery.Timeout < 1 {
		bad("remote_query.timeout", "must be at least 1 (second)")
	}
	if c.RemoteQuery.BootServersPerPage < 1 {
		bad("remote_query.boot_servers_per_page", "must be at least 1")
	}
	for name, value := range c.RemoteQuery.CustomHeaders {
		if !validHeaderName(name) || strings.ContainsAny(value, "\r\n\x00") {
			bad("remote_query.custom_headers", "each name must be an HTTP header name and each value a single line")
			break
		}
	}
}

func validateThrottles(c *Config, bad badFunc) {
	if c.Throttles.Lines < 1 {
		bad("throttles.lines", "must be at least 1")
	}
	if c.Throttles.LineResetInterval < 1 {
		bad("throttles.line_reset_interval", "must be at least 1 (ms)")
	}
}

func validateDocker(c *Config, bad badFunc) {
	if c.Docker.ContainerPidLimit < 0 {
		bad("docker.container_pid_limit", "must not be negative")
	}
	if c.Docker.TmpfsSize < 0 {
		bad("docker.tmpfs_size", "must not be negative")
	}
	if c.Docker.Network.Name == "" {
		bad("docker.network.name", "is required")
	}
	validateBlockedDestinations(c.Docker.Network, bad)
	if err := ValidateEngineHost(c.Docker.Host); err != nil {
		bad("docker.host", err.Error())
	}
}

// ValidateEngineHost checks docker.host: empty (DOCKER_HOST or Docker's
// default socket), "unix://" and an absolute socket path, or "tcp://",
// "http://" or "https://" with a host and a port and nothing else.
func ValidateEngineHost(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("must be unix:///path/to/engine.sock or tcp://host:port: %v", err)
	}
	switch u.Scheme {
	case "unix":
		if u.Host != "" || !filepath.IsAbs(u.Path) || u.RawQuery != "" || u.Fragment != "" {
			return errors.New("must be unix:// and an absolute socket path, e.g. unix:///run/podman/podman.sock")
		}
	case "tcp", "http", "https":
		if u.Hostname() == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.User != nil || u.RawQuery != "" {
			return fmt.Errorf("must be %s://host:port", u.Scheme)
		}
	default:
		return errors.New("must be unix:///path/to/engine.sock or tcp://host:port")
	}
	return nil
}

// validateBlockedDestinations checks docker.network.blocked_destinations:
// each entry a CIDR or a single address, never everything (/0) nor the
// node's own container subnets (which would cut the containers off the
// gateway).
func validateBlockedDestinations(n DockerNetwork, bad badFunc) {
	const key = "docker.network.blocked_destinations"
	own := []string{n.Interfaces.V4.Subnet, n.Interfaces.V6.Subnet}
	for _, s := range n.BlockedDestinations {
		p, err := ParseDestination(s)
		if err != nil {
			bad(key, err.Error())
			continue
		}
		if p.Bits() == 0 {
			bad(key, fmt.Sprintf("%q blocks every address: use docker.network.is_internal for a network without any outside access", s))
			continue
		}
		for _, o := range own {
			if op, err := netip.ParsePrefix(o); err == nil && op.Overlaps(p) {
				bad(key, fmt.Sprintf("%q overlaps the node's container subnet %s: the containers would lose their gateway", s, o))
			}
		}
	}
}

// ParseDestination parses one entry of docker.network.blocked_destinations:
// a CIDR whose address has no bits set past the prefix, or a single address
// (a /32 or /128). IPv4-mapped IPv6 forms are refused.
func ParseDestination(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR or an IP address", s)
		}
		if a.Is4In6() {
			return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped address: write the IPv4 form", s)
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR or an IP address", s)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is an IPv4-mapped prefix: write the IPv4 form", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has bits set past its prefix length: did you mean %s?", s, p.Masked())
	}
	return p, nil
}

func validateHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("is not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("must be an http or https URL")
	}
	if u.Host == "" {
		return errors.New("must include a host")
	}
	return nil
}

// validHeaderName: an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)
		if !ok {
			return false
		}
	}
	return true
}

// validateSFTPLimits checks the SFTP server's resource limits: each must
// allow at least one of what it counts.
func validateSFTPLimits(s SFTP, bad badFunc) {
	for _, l := range []struct {
		key string
		v   int
	}{
		{"system.sftp.max_handles", s.MaxHandles},
		{"system.sftp.max_sessions", s.MaxSessions},
		{"system.sftp.max_connections_per_server", s.MaxConnectionsPerServer},
		{"system.sftp.max_startups", s.MaxStartups},
		{"system.sftp.max_startups_per_source", s.MaxStartupsPerSource},
		{"system.sftp.login_grace_time", s.LoginGraceTime},
	} {
		if l.v < 1 {
			bad(l.key, "must be at least 1")
		}
	}
	if s.UploadGCHeadroom < 0 || s.UploadGCHeadroom > maxUploadGCHeadroom {
		bad("system.sftp.upload_gc_headroom", fmt.Sprintf("must be between 0 and %d (MiB)", maxUploadGCHeadroom))
	}
}

// maxUploadGCHeadroom bounds system.sftp.upload_gc_headroom (MiB).
const maxUploadGCHeadroom = 1024

// validateDiskChecks checks the settings of the running servers' disk
// limit monitor (issue 32).
func validateDiskChecks(s System, bad badFunc) {
	if s.DiskCheckInterval < 1 || s.DiskCheckInterval > 3600 {
		bad("system.disk_check_interval", fmt.Sprintf("must be between 1 and 3600 (seconds), got %d", s.DiskCheckInterval))
	}
	// A walk interval below the check interval is taken as the check
	// interval (a Wings configuration may carry a long check interval).
	if s.DiskWalkInterval < 1 || s.DiskWalkInterval > 86400 {
		bad("system.disk_walk_interval", fmt.Sprintf("must be between 1 and 86400 (seconds), got %d", s.DiskWalkInterval))
	}
	if s.DiskEntryLimit < 0 {
		bad("system.disk_entry_limit", "must be 0 (no bound) or more")
	}
}
