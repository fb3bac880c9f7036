// Package diagnostics implements `wharf diagnostics`: one plain-text report
// an operator can paste into a support thread. It never contains a secret:
// the configuration is shown with its credentials replaced, and the whole
// report is scrubbed of every credential value before it is written.
package diagnostics

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/firewall"
	"github.com/wharf/wharf/internal/hostinfo"
	"github.com/wharf/wharf/internal/quota"
	"github.com/wharf/wharf/internal/rootless"
	wruntime "github.com/wharf/wharf/internal/runtime"
)

// Redacted replaces every secret in the report; RedactedEndpoint an address
// left out on request.
const (
	Redacted         = "REDACTED"
	RedactedEndpoint = "{redacted}"
)

// Options configure a report.
type Options struct {
	ConfigPath string
	Version    string
	Commit     string
	// LogLines is how many of the last daemon log lines to include; none
	// (and no log section) when 0.
	LogLines int
	// Logs returns the last n lines of the daemon log; the journal of the
	// wharf unit (journalctl) when nil.
	Logs func(ctx context.Context, n int) ([]string, error)
	// Runtime is the node's container runtime: the report asks it what
	// the engine is and which bridge the node's network is (when it can:
	// runtime.EngineDescriber, runtime.NetworkInspector). The daemon passes
	// its own, `wharf diagnostics` the Docker engine's; nil with
	// RuntimeError when none answers.
	Runtime      wruntime.Runtime
	RuntimeError error
	// HideEndpoints replaces the node's addresses (the panel's URL, the API's
	// and SFTP's host and port, the metrics listener, S3 endpoints) wherever
	// they appear, for a report that is pasted in public (Pelican's
	// include_endpoints=false). Secrets are always replaced.
	HideEndpoints bool
	// TokenScopes counts the valid tokens the running daemon has seen with
	// and without a scope claim; nil outside the daemon.
	TokenScopes func() (scoped, unscoped int64)
}

// Write produces the report on out.
func Write(ctx context.Context, out io.Writer, opts Options) error {
	var b strings.Builder
	section := func(title string) { fmt.Fprintf(&b, "\n== %s ==\n", title) }

	fmt.Fprintf(&b, "Wharf diagnostics, %s\n", time.Now().UTC().Format(time.RFC3339))
	section("Versions")
	fmt.Fprintf(&b, "wharf:   %s (commit %s)\n", opts.Version, opts.Commit)
	fmt.Fprintf(&b, "go:      %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "kernel:  %s\n", hostinfo.Kernel())
	fmt.Fprintf(&b, "os:      %s\n", cmp.Or(hostinfo.OSPrettyName(hostinfo.Proc().OSRelease), "unknown"))

	section("Configuration " + opts.ConfigPath)
	cfg, secrets := configuration(&b, opts.ConfigPath, opts.HideEndpoints)

	section("Container engine")
	engineInfo(ctx, &b, opts, cfg)

	if cfg != nil {
		section("Panel")
		panelCheck(ctx, &b, cfg)
		section("Disk space")
		diskSpace(&b, cfg)
		section("Disk limit enforcement")
		diskEnforcement(&b, cfg)
		section("Backups")
		backupFormat(&b, cfg)
		section("Tokens")
		tokenScopes(&b, cfg, opts.TokenScopes)
		section("Network isolation")
		networkIsolation(ctx, &b, cfg, opts)
	}

	if opts.LogLines > 0 {
		logSection(ctx, &b, opts)
	}

	report := scrub(b.String(), secrets)
	if opts.HideEndpoints && cfg != nil {
		report = scrubWith(report, endpoints(cfg), RedactedEndpoint)
	}
	_, err := io.WriteString(out, report)
	return err
}

func logSection(ctx context.Context, b *strings.Builder, opts Options) {
	fmt.Fprintf(b, "\n== Last %d log lines ==\n", opts.LogLines)
	logs := opts.Logs
	if logs == nil {
		logs = journal
	}
	lines, err := logs(ctx, opts.LogLines)
	if err != nil {
		fmt.Fprintf(b, "(not available: %v)\n", err)
		return
	}
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
}

// scrub replaces every occurrence of a secret value.
func scrub(s string, secrets []string) string { return scrubWith(s, secrets, Redacted) }

func scrubWith(s string, values []string, with string) string {
	for _, v := range values {
		if len(v) >= 3 { // shorter values would blank out ordinary text
			s = strings.ReplaceAll(s, v, with)
		}
	}
	return s
}

// noRuntime says why the report cannot ask the runtime, "" when it can.
func noRuntime(opts Options) string {
	switch {
	case opts.RuntimeError != nil:
		return fmt.Sprintf("the engine does not answer: %v", opts.RuntimeError)
	case opts.Runtime == nil:
		return "no container runtime"
	}
	return ""
}

func engineInfo(ctx context.Context, b *strings.Builder, opts Options, cfg *config.Config) {
	if why := noRuntime(opts); why != "" {
		fmt.Fprintf(b, "(%s)\n", why)
		return
	}
	e, ok := opts.Runtime.(wruntime.EngineDescriber)
	if !ok {
		b.WriteString("(this node's container runtime does not describe its engine)\n")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := e.EngineInfo(ctx)
	if err != nil {
		fmt.Fprintf(b, "(the engine does not answer: %v)\n", err)
		return
	}
	host := ""
	if cfg != nil {
		host = cfg.Docker.Host
	}
	fmt.Fprintf(b, "engine:         %s (API %s)\n", strings.TrimSpace(info.Name+" "+info.Version), info.APIVersion)
	fmt.Fprintf(b, "address:        %s\n", engineHost(host))
	fmt.Fprintf(b, "rootless:       %v\n", info.Rootless)
	fmt.Fprintf(b, "storage driver: %s\n", info.StorageDriver)
	fmt.Fprintf(b, "cgroup:         v%s, driver %s\n", info.CgroupVersion, info.CgroupDriver)
	fmt.Fprintf(b, "containers:     %d (%d running)\n", info.Containers, info.Running)
	if info.Rootless && cfg != nil {
		if cfg.Docker.RootlessWithoutFirewallAccepted {
			b.WriteString("WARNING: rootless: servers run without Wharf's firewall (neighbour isolation, blocked destinations) (docker.rootless_without_firewall_accepted: true)\n")
		} else {
			b.WriteString("PROBLEM: rootless: Wharf refuses to boot (its firewall does not see the engine's slirp4netns traffic); see docker.rootless_without_firewall_accepted\n")
		}
		if info.CgroupVersion == "1" {
			if cfg.Docker.RootlessCgroupV1Accepted {
				b.WriteString("WARNING: rootless on cgroup v1: servers run without memory, CPU and process limits (docker.rootless_cgroup_v1_accepted: true)\n")
			} else {
				b.WriteString("PROBLEM: rootless on cgroup v1: Wharf refuses to boot (the engine drops every limit); see docker.rootless_cgroup_v1_accepted\n")
			}
		}
		b.WriteString("a rootless engine needs:\n")
		for _, need := range cfg.RootlessEngineNeeds() {
			fmt.Fprintf(b, "  - %s\n", need)
		}
		rootlessState(b, cfg)
	}
}

// engineHost is the engine's address as the runtime dials it: docker.host,
// else DOCKER_HOST, else Docker's default socket.
func engineHost(host string) string {
	if host != "" {
		return host
	}
	if env := os.Getenv("DOCKER_HOST"); env != "" {
		return env
	}
	return "unix:///var/run/docker.sock"
}

// configuration prints the configuration with its secrets replaced and
// returns it with the secret values (for scrub).
func configuration(b *strings.Builder, path string, hideEndpoints bool) (*config.Config, []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(b, "(cannot read it: %v)\n", err)
		return nil, nil
	}
	c, err := config.Parse(data)
	if err != nil {
		fmt.Fprintf(b, "(not valid YAML: %v)\n", err)
		return nil, nil
	}
	s3 := c.System.Backups.Repository.S3
	secrets := []string{c.Token, c.TokenID, c.API.SSL.Key, c.API.SSL.Cert, c.Metrics.Token, s3.AccessKeyID, s3.SecretAccessKey}
	shown := c.Clone()
	redact := func(s *string) {
		if *s != "" {
			*s = Redacted
		}
	}
	redact(&shown.Token)
	redact(&shown.TokenID)
	redact(&shown.API.SSL.Cert)
	redact(&shown.API.SSL.Key)
	redact(&shown.Metrics.Token)
	redact(&shown.System.Backups.Repository.S3.AccessKeyID)
	redact(&shown.System.Backups.Repository.S3.SecretAccessKey)
	for name, v := range c.RemoteQuery.CustomHeaders {
		secrets = append(secrets, v)
		shown.RemoteQuery.CustomHeaders[name] = Redacted
	}
	for name, r := range shown.Docker.Registries {
		secrets = append(secrets, c.Docker.Registries[name].Password)
		redact(&r.Password)
		shown.Docker.Registries[name] = r
	}
	if hideEndpoints {
		hideEndpointsIn(shown)
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(b, "invalid: %v\n", err)
	}
	if keys := config.UnknownKeys(data); len(keys) > 0 {
		fmt.Fprintf(b, "keys not used by this version: %s\n", strings.Join(keys, ", "))
	}
	yml, err := shown.Marshal()
	if err != nil {
		fmt.Fprintf(b, "(cannot render it: %v)\n", err)
		return c, secrets
	}
	b.Write(yml)
	return c, secrets
}

// panelCheck calls the panel's remote API with the node credentials.
func panelCheck(ctx context.Context, b *strings.Builder, c *config.Config) {
	if c.Remote == "" {
		b.WriteString("remote is not set\n")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	u := strings.TrimRight(c.Remote, "/") + "/api/remote/servers?page=0&per_page=1"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		fmt.Fprintf(b, "remote %q is not a valid URL\n", c.Remote)
		return
	}
	req.Header.Set("Authorization", "Bearer "+c.TokenID+"."+c.Token)
	for name, v := range c.RemoteQuery.CustomHeaders {
		req.Header.Set(name, v) // the access proxy in front of the panel
	}
	req.Header.Set("Accept", "application/vnd.pterodactyl.v1+json")
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(b, "%s does not answer: %v\n", c.Remote, err)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
	res.Body.Close()
	verdict := "answers and accepts the node credentials"
	switch {
	case res.StatusCode == 401 || res.StatusCode == 403:
		verdict = "answers but refuses the node credentials (token_id/token)"
	case res.StatusCode >= 300:
		verdict = "answers with an error"
	}
	fmt.Fprintf(b, "%s %s: %s in %s\n", c.Remote, verdict, res.Status, time.Since(start).Round(time.Millisecond))
}

// backupFormat shows the effective system.backups.format (an empty key
// means archive) and where the repository is.
func backupFormat(b *strings.Builder, c *config.Config) {
	fmt.Fprintf(b, "system.backups.format: %s\n", c.BackupFormat())
	if c.BackupFormat() == config.BackupFormatRepository {
		if s3 := c.System.Backups.Repository.S3; s3.Enabled() {
			endpoint := s3.Endpoint
			if endpoint == "" {
				endpoint = "AWS S3, " + s3.EffectiveRegion()
			}
			fmt.Fprintf(b, "repository: s3://%s/%s (%s)\n", s3.Bucket, s3.Prefix, endpoint)
		} else {
			fmt.Fprintf(b, "repository: %s\n", c.BackupRepositoryPath())
		}
		repositoryClaims(b, c)
	}
}

// repositoryClaims says which nodes claimed the repository, and whether
// this node may back up into it (issue 33 item 10).
func repositoryClaims(b *strings.Builder, c *config.Config) {
	if !c.System.Backups.Repository.S3.Enabled() {
		if _, err := os.Stat(c.BackupRepositoryPath()); err != nil {
			b.WriteString("repository nodes: none yet (no repository)\n")
			return
		}
	}
	claims, err := backup.RepositoryClaims(c)
	if err != nil {
		fmt.Fprintf(b, "repository nodes: cannot list them: %v\n", err)
		return
	}
	mine := chunkstore.NodeObject(c.UUID)
	var others []string
	for _, n := range claims {
		if n != mine {
			others = append(others, n)
		}
	}
	switch {
	case len(others) > 0 && c.System.Backups.Repository.Shared:
		fmt.Fprintf(b, "repository nodes: shared with %s (system.backups.repository.shared: true; a node that does not share it is refused)\n",
			strings.Join(others, ", "))
	case len(others) > 0:
		setting := "system.backups.repository.path"
		if c.System.Backups.Repository.S3.Enabled() {
			setting = "system.backups.repository.s3"
		}
		fmt.Fprintf(b, "repository nodes: ANOTHER NODE uses this repository (%s): this node refuses to back up into it; "+
			"give each node its own %s (docs/backup-repository.md)\n", strings.Join(others, ", "), setting)
	case len(claims) == 0:
		b.WriteString("repository nodes: none yet (this node claims it at its first backup)\n")
	default:
		fmt.Fprintf(b, "repository nodes: this node only (%s)\n", mine)
	}
}

// tokenScopes shows api.require_token_scope and, in the daemon, whether the
// panel's tokens carry a scope: when all of them do, requiring it costs
// nothing and refuses a token minted for one purpose on another face.
func tokenScopes(b *strings.Builder, c *config.Config, seen func() (int64, int64)) {
	fmt.Fprintf(b, "api.require_token_scope: %v\n", c.API.RequireTokenScope)
	if seen == nil {
		b.WriteString("(which tokens carry a scope: see the report of the running daemon, GET /api/diagnostics)\n")
		return
	}
	scoped, unscoped := seen()
	fmt.Fprintf(b, "valid tokens since the start: %d with a scope claim, %d without\n", scoped, unscoped)
	switch {
	case !c.API.RequireTokenScope && scoped > 0 && unscoped == 0:
		b.WriteString("suggestion: the panel puts a scope on every token (Pterodactyl 1.12+ or Pelican): set api.require_token_scope: true\n")
	case c.API.RequireTokenScope && unscoped > 0:
		b.WriteString("warning: tokens without a scope were refused (a panel older than Pterodactyl 1.12?): its users cannot connect while api.require_token_scope is on\n")
	}
}

func diskSpace(b *strings.Builder, c *config.Config) {
	for _, d := range []struct{ key, path string }{
		{"root_directory", c.System.RootDirectory},
		{"data", c.System.Data},
		{"backup_directory", c.System.BackupDirectory},
		{"archive_directory", c.System.ArchiveDirectory},
		{"tmp_directory", c.System.TmpDirectory},
		{"log_directory", c.System.LogDirectory},
	} {
		var st syscall.Statfs_t
		if err := syscall.Statfs(d.path, &st); err != nil {
			fmt.Fprintf(b, "%-18s %s: %v\n", d.key, d.path, err)
			continue
		}
		bs := uint64(st.Bsize)
		fmt.Fprintf(b, "%-18s %s: %s free of %s\n", d.key, d.path, human(st.Bavail*bs), human(st.Blocks*bs))
	}
}

func human(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// journal reads the last n lines of the wharf unit's journal.
func journal(ctx context.Context, n int) ([]string, error) {
	path, err := exec.LookPath("journalctl")
	if err != nil {
		return nil, fmt.Errorf("journalctl not found; the daemon logs to stderr")
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--unit", "wharf", "--lines", fmt.Sprint(n), "--no-pager", "--output", "short-iso").Output()
	if err != nil {
		return nil, fmt.Errorf("journalctl: %v", err)
	}
	return strings.Split(strings.TrimRight(string(out), "\n"), "\n"), nil
}

// networkIsolation says whether neighbours are isolated and private
// destinations blocked, and whether Wharf's firewall rules are in the
// kernel now (docs/security.md).
func networkIsolation(ctx context.Context, b *strings.Builder, cfg *config.Config, opts Options) {
	nw := cfg.Docker.Network
	if !nw.ICCDefaultApplied {
		nw.EnableICC = false // the next boot applies Wharf's default (config.ApplyICCDefault)
	}
	if nw.EnableICC {
		b.WriteString("enable_icc:   true  WARNING: containers on the bridge reach each other's unpublished ports\n")
	} else {
		b.WriteString("enable_icc:   false (servers reach each other only through published ports)\n")
	}
	if !nw.Firewall {
		b.WriteString("firewall:     OFF  WARNING: docker.network.firewall is false: nothing blocks the cloud metadata service or link-local addresses, nor neighbours beyond the engine's own ICC option\n")
		return
	}
	blocked := firewall.BuiltinBlocked()
	var operator []netip.Prefix
	for _, s := range nw.BlockedDestinations {
		if p, err := config.ParseDestination(s); err == nil {
			operator = append(operator, p)
		}
	}
	fmt.Fprintf(b, "blocked:      %v (built in), %v (docker.network.blocked_destinations)\n", blocked, operator)
	if why := noRuntime(opts); why != "" {
		fmt.Fprintf(b, "rules:        (%s)\n", why)
		return
	}
	rt, ok := opts.Runtime.(wruntime.NetworkInspector)
	if !ok {
		b.WriteString("rules:        (this node's container runtime has no bridge network)\n")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := rt.InspectNetwork(ctx, nw.Name)
	if err != nil {
		fmt.Fprintf(b, "rules:        (network %s: %v)\n", nw.Name, err)
		return
	}
	if info.BridgeName == "" {
		fmt.Fprintf(b, "rules:        none: network %s is not a bridge (driver %s)\n", nw.Name, info.Driver)
		return
	}
	fw := firewall.New(firewall.Options{AllowICC: nw.EnableICC, Blocked: operator})
	br := firewall.Bridge{Name: info.BridgeName}
	if p, err := netip.ParsePrefix(info.IPv4Subnet); err == nil {
		br.IPv4Subnet = p
	}
	if _, err := fw.AddBridge(br); err != nil {
		fmt.Fprintf(b, "rules:        %v\n", err)
		return
	}
	if err := fw.Verify(); err != nil {
		fmt.Fprintf(b, "rules:        NOT IN PLACE for bridge %s: %v (servers do not start until the daemon reinstalls them)\n", info.BridgeName, err)
		return
	}
	fmt.Fprintf(b, "rules:        in place (nft list table inet %s; nft list table bridge %s)\n", firewall.TableName(info.BridgeName), firewall.TableName(info.BridgeName))
}

// diskEnforcement says how each server's disk limit is held against its
// game's own writes (issue 32): by the kernel (project quotas) with Wharf's
// monitor, or by the monitor alone.
func diskEnforcement(b *strings.Builder, c *config.Config) {
	sys := c.System
	quotaErr := quota.Available(sys.Data)
	kernel := sys.Quotas.Enabled && quotaErr == nil
	switch {
	case kernel:
		fmt.Fprintf(b, "kernel project quotas: on (system.quotas.enabled): the filesystem refuses writes past a server's disk limit\n")
	case quotaErr == nil:
		fmt.Fprintf(b, "kernel project quotas: available on %s but off; recommended: set system.quotas.enabled: true\n", sys.Data)
	default:
		fmt.Fprintf(b, "kernel project quotas: unavailable (%v)\n", quotaErr)
	}
	fmt.Fprintf(b, "disk monitor: every %d s (system.disk_check_interval), full walk at least every %d s (system.disk_walk_interval), entry limit %s (system.disk_entry_limit)\n",
		sys.DiskCheckInterval, max(sys.DiskWalkInterval, sys.DiskCheckInterval), entryLimitText(sys.DiskEntryLimit))
	entries, err := os.ReadDir(sys.Data)
	if err != nil {
		fmt.Fprintf(b, "servers: %v\n", err)
		return
	}
	shown := 0
	for _, e := range entries {
		if !e.IsDir() || uuid.Validate(e.Name()) != nil {
			continue
		}
		if shown == 200 {
			fmt.Fprintf(b, "(more servers not listed)\n")
			break
		}
		shown++
		mode := "Wharf's disk monitor"
		if kernel {
			if id, err := quota.ProjectOf(filepath.Join(sys.Data, e.Name())); err == nil && id != 0 {
				mode = fmt.Sprintf("kernel quota (project %d) and Wharf's disk monitor", id)
			} else {
				mode = "Wharf's disk monitor (no project quota on the directory yet: set at its next sync or start)"
			}
		}
		fmt.Fprintf(b, "server %s: %s\n", e.Name(), mode)
	}
	if shown == 0 {
		fmt.Fprintf(b, "servers: none in %s\n", sys.Data)
	}
}

func entryLimitText(n int64) string {
	if n <= 0 {
		return "none"
	}
	return fmt.Sprintf("%d", n)
}

// rootlessState is what rootless.Check finds on this node for the
// rootless engine's user: what holds, what Wharf fixes at its next boot,
// and what the operator must do (issue 37).
func rootlessState(b *strings.Builder, cfg *config.Config) {
	u, err := rootless.EngineUser(engineHost(cfg.Docker.Host))
	if err != nil {
		fmt.Fprintf(b, "PROBLEM: %v\n", err)
		return
	}
	fmt.Fprintf(b, "on this node, for the engine's user (uid %d, gid %d):\n", u.UID, u.GID)
	for _, f := range rootless.Check(cfg, u, rootless.Options{}) {
		fmt.Fprintf(b, "  - %s\n", f)
	}
}
