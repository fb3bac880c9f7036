// Package config owns the node configuration: its schema and defaults, loading
// from YAML, validation, atomic saving, and the live view that POST /api/update
// changes at run time.
//
// YAML keys (the file) and JSON keys (the body of POST /api/update) are the
// same snake_case names, as the spec says both have the same structure.
package config

// Config is the node configuration. A *Config obtained from a Store is shared
// and must be treated as read-only; use Clone to change a copy.
type Config struct {
	Debug                    bool        `yaml:"debug" json:"debug"`
	AppName                  string      `yaml:"app_name" json:"app_name"`
	UUID                     string      `yaml:"uuid" json:"uuid"`
	TokenID                  string      `yaml:"token_id" json:"token_id"`
	Token                    string      `yaml:"token" json:"token"`
	API                      API         `yaml:"api" json:"api"`
	System                   System      `yaml:"system" json:"system"`
	Docker                   Docker      `yaml:"docker" json:"docker"`
	Throttles                Throttles   `yaml:"throttles" json:"throttles"`
	Remote                   string      `yaml:"remote" json:"remote"`
	RemoteQuery              RemoteQuery `yaml:"remote_query" json:"remote_query"`
	AllowedMounts            []string    `yaml:"allowed_mounts" json:"allowed_mounts"`
	AllowedOrigins           []string    `yaml:"allowed_origins" json:"allowed_origins"`
	AllowCORSPrivateNetwork  bool        `yaml:"allow_cors_private_network" json:"allow_cors_private_network"`
	IgnorePanelConfigUpdates bool        `yaml:"ignore_panel_config_updates" json:"ignore_panel_config_updates"`
	Metrics                  Metrics     `yaml:"metrics" json:"metrics"`
	Testing                  Testing     `yaml:"testing,omitempty" json:"testing,omitzero"`
}

// Metrics configures the Prometheus endpoint. It is off unless
// bind_address is set, and every scrape needs the bearer token.
type Metrics struct {
	BindAddress string `yaml:"bind_address" json:"bind_address"` // host:port; empty = off
	Token       string `yaml:"token" json:"token"`               // Authorization: Bearer <token>
}

// API holds the HTTP listener settings.
type API struct {
	Host                  string         `yaml:"host" json:"host"`
	Port                  int            `yaml:"port" json:"port"`
	SSL                   SSL            `yaml:"ssl" json:"ssl"`
	DisableRemoteDownload bool           `yaml:"disable_remote_download" json:"disable_remote_download"`
	UploadLimit           int64          `yaml:"upload_limit" json:"upload_limit"` // MB per uploaded file
	TrustedProxies        []string       `yaml:"trusted_proxies" json:"trusted_proxies"`
	RemoteDownload        RemoteDownload `yaml:"remote_download" json:"remote_download"`
	// RequireTokenScope refuses, on every face, a signed token without a
	// scope claim. Pterodactyl since 1.12 and Pelican put one on every
	// token; off by default so that Pterodactyl 1.11 panels keep working.
	RequireTokenScope bool `yaml:"require_token_scope" json:"require_token_scope"`
}

// RemoteDownload holds the settings of the file manager's "download from
// URL" (files/pull).
type RemoteDownload struct {
	// MaxRedirects is how many redirects a download follows (each checked).
	MaxRedirects int `yaml:"max_redirects" json:"max_redirects"`
	// AllowLoopback lets downloads reach 127.0.0.1 (other loopback
	// addresses stay refused). For tests only; never changed by POST
	// /api/update.
	AllowLoopback bool `yaml:"allow_loopback" json:"allow_loopback"`
}

// SSL holds the TLS settings of the listener.
type SSL struct {
	Enabled bool   `yaml:"enabled" json:"enabled"`
	Cert    string `yaml:"cert" json:"cert"`
	Key     string `yaml:"key" json:"key"`
}

// System holds the host-side settings.
type System struct {
	RootDirectory     string     `yaml:"root_directory" json:"root_directory"`
	LogDirectory      string     `yaml:"log_directory" json:"log_directory"`
	LogFormat         string     `yaml:"log_format" json:"log_format"` // text | json
	Data              string     `yaml:"data" json:"data"`
	ArchiveDirectory  string     `yaml:"archive_directory" json:"archive_directory"`
	BackupDirectory   string     `yaml:"backup_directory" json:"backup_directory"`
	TmpDirectory      string     `yaml:"tmp_directory" json:"tmp_directory"`
	Username          string     `yaml:"username" json:"username"`
	Timezone          string     `yaml:"timezone" json:"timezone"`
	User              SystemUser `yaml:"user" json:"user"`
	DiskCheckInterval int        `yaml:"disk_check_interval" json:"disk_check_interval"` // seconds
	// DiskWalkInterval (seconds) is how often a running server's tree is
	// counted in full even when nothing suggests it grew (issue 32): the
	// bound for what the per-process write counters cannot see.
	DiskWalkInterval int `yaml:"disk_walk_interval" json:"disk_walk_interval"`
	// DiskEntryLimit is the most entries (files, directories, links) a
	// server's directory may hold while its game runs; 0 means no bound.
	DiskEntryLimit         int64          `yaml:"disk_entry_limit" json:"disk_entry_limit"`
	ActivitySendInterval   int            `yaml:"activity_send_interval" json:"activity_send_interval"`
	ActivitySendCount      int            `yaml:"activity_send_count" json:"activity_send_count"`
	CheckPermissionsOnBoot bool           `yaml:"check_permissions_on_boot" json:"check_permissions_on_boot"`
	WebsocketLogCount      int            `yaml:"websocket_log_count" json:"websocket_log_count"`
	SFTP                   SFTP           `yaml:"sftp" json:"sftp"`
	CrashDetection         CrashDetection `yaml:"crash_detection" json:"crash_detection"`
	// CrashActivityLines is how many of the last console lines the
	// server:crashed activity carries (Pelican Wings' key).
	CrashActivityLines int        `yaml:"crash_detection_activity_lines" json:"crash_detection_activity_lines"`
	Backups            Backups    `yaml:"backups" json:"backups"`
	Transfers          Transfers  `yaml:"transfers" json:"transfers"`
	Decompress         Decompress `yaml:"decompress" json:"decompress"`
	MachineID          MachineID  `yaml:"machine_id" json:"machine_id"`
	Quotas             Quotas     `yaml:"quotas" json:"quotas"`
}

// Quotas turns on kernel project quotas for the server directories
// (Pelican Wings' system.quotas): the filesystem itself then refuses the
// game's writes past the server's disk limit. Off by default.
type Quotas struct {
	Enabled bool `yaml:"enabled" json:"enabled"`
}

// Decompress bounds the child process that decodes a user's archive for
// files/decompress (docs/security.md, "Decompression").
type Decompress struct {
	MemoryLimit int `yaml:"memory_limit" json:"memory_limit"` // MiB of address space
	CPULimit    int `yaml:"cpu_limit" json:"cpu_limit"`       // seconds of CPU time
	Timeout     int `yaml:"timeout" json:"timeout"`           // seconds of wall-clock time
}

// MachineID is the per-server /etc/machine-id (Pelican Wings' key): a file
// named after each server in Directory, holding its uuid without dashes,
// mounted read-only into its container. Some games (Hytale) keep their
// authentication state by the machine id.
type MachineID struct {
	Enable    bool   `yaml:"enable" json:"enable"`
	Directory string `yaml:"directory" json:"directory"`
}

// Passwd is the /etc/passwd and /etc/group pair mounted read-only into every
// server container (Pelican Wings' system.user.passwd), naming the uid and
// gid the container runs as, for images that need a resolvable user.
type Passwd struct {
	Enable    bool   `yaml:"enable" json:"enable"`
	Directory string `yaml:"directory" json:"directory"`
}

// SystemUser is the account that owns server files; uid/gid are filled at boot.
type SystemUser struct {
	Rootless Rootless `yaml:"rootless" json:"rootless"`
	UID      int      `yaml:"uid" json:"uid"`
	GID      int      `yaml:"gid" json:"gid"`
	Passwd   Passwd   `yaml:"passwd" json:"passwd"`
}

// Rootless configures rootless container mode.
type Rootless struct {
	Enabled      bool `yaml:"enabled" json:"enabled"`
	ContainerUID int  `yaml:"container_uid" json:"container_uid"`
	ContainerGID int  `yaml:"container_gid" json:"container_gid"`
}

// SFTP configures the SFTP listener.
type SFTP struct {
	BindAddress string `yaml:"bind_address" json:"bind_address"`
	BindPort    int    `yaml:"bind_port" json:"bind_port"`
	ReadOnly    bool   `yaml:"read_only" json:"read_only"`
	// KeyOnly refuses password logins (Pelican's system.sftp.key_only).
	KeyOnly bool `yaml:"key_only" json:"key_only"`
	// MaxHandles caps the files and directory listings one SFTP
	// connection holds open at once (docs/security.md, "SFTP limits").
	MaxHandles int `yaml:"max_handles" json:"max_handles"`
	// MaxSessions caps the session channels of one connection
	// (OpenSSH's MaxSessions).
	MaxSessions int `yaml:"max_sessions" json:"max_sessions"`
	// MaxConnectionsPerServer caps the logged-in connections to one
	// server, so that one server's users cannot hold all of the node's
	// descriptors with max_handles on each of many connections.
	MaxConnectionsPerServer int `yaml:"max_connections_per_server" json:"max_connections_per_server"`
	// MaxStartups caps the connections not yet authenticated, node-wide;
	// MaxStartupsPerSource caps them per source address (an IPv4
	// address, an IPv6 /64). OpenSSH's MaxStartups is the model.
	MaxStartups          int `yaml:"max_startups" json:"max_startups"`
	MaxStartupsPerSource int `yaml:"max_startups_per_source" json:"max_startups_per_source"`
	// LoginGraceTime is the seconds a connection has, from accept, to
	// authenticate (OpenSSH's LoginGraceTime).
	LoginGraceTime int `yaml:"login_grace_time" json:"login_grace_time"`
	// UploadGCHeadroom is how far (MiB) above its live heap the daemon's
	// heap may grow while SFTP uploads write, so that the collector runs
	// less often for their garbage (issue 38 §1b; sftpd/gcpace.go); 0
	// leaves the collector's percentage alone.
	UploadGCHeadroom int `yaml:"upload_gc_headroom" json:"upload_gc_headroom"`
}

// CrashDetection configures automatic restarts after a crash.
type CrashDetection struct {
	Enabled                bool `yaml:"enabled" json:"enabled"`
	DetectCleanExitAsCrash bool `yaml:"detect_clean_exit_as_crash" json:"detect_clean_exit_as_crash"`
	Timeout                int  `yaml:"timeout" json:"timeout"` // seconds
}

// Backups configures backup creation and restoration.
type Backups struct {
	WriteLimit           float64  `yaml:"write_limit" json:"write_limit"` // MB/s, 0 = unlimited
	CompressionLevel     string   `yaml:"compression_level" json:"compression_level"`
	RestoreHostAllowlist []string `yaml:"restore_host_allowlist" json:"restore_host_allowlist"`
	// Layout of new local backups in backup_directory: flat
	// (<dir>/<backup>.tar.gz, Pterodactyl Wings'), per_server
	// (<dir>/<server>/<backup>.tar.gz, Pelican Wings') or auto (per_server
	// when the directory already holds a server's subdirectory, else flat).
	// Both layouts are always read.
	Layout string `yaml:"layout" json:"layout"`
	// ObjectStorePartsOnDisk is how many parts of an object-store backup
	// may exist on local disk at once, each being filled or uploaded: the
	// disk used and the uploads in flight (docs/configuration.md).
	ObjectStorePartsOnDisk int `yaml:"object_store_parts_on_disk" json:"object_store_parts_on_disk"`
	// Format of new local backups: archive (default) or repository
	// (backuprepo.go).
	Format     string           `yaml:"format" json:"format"`
	Repository BackupRepository `yaml:"repository" json:"repository"`
	// Downloads bounds the signed downloads of repository backups
	// (backupdownloads.go).
	Downloads BackupDownloads `yaml:"downloads" json:"downloads"`
	// Browse shows each server's repository backups as a read-only folder
	// BrowseDirectory at the root of its files (backupbrowse.go, issue 35).
	Browse          bool   `yaml:"browse" json:"browse"`
	BrowseDirectory string `yaml:"browse_directory" json:"browse_directory"`
}

// Transfers configures server transfers.
type Transfers struct {
	DownloadLimit int `yaml:"download_limit" json:"download_limit"`
	// Live turns on live transfers between Wharf nodes (docs/live-transfers.md;
	// on by default): as a source, ask the target whether it speaks them; as
	// a target, answer that it does. Off, both directions use the classic
	// transfer only.
	Live bool `yaml:"live" json:"live"`
	// Compression of a live transfer's stream: auto, zstd or none.
	Compression string `yaml:"compression" json:"compression"`
	// MaxBackups bounds the backups a target accepts from one classic
	// transfer (`backup_<uuid>.tar.gz` parts); 0 accepts none. Issue 33
	// item 7: the panel names them to the source only, so a target
	// cannot tell them from parts a peer adds (docs/compatibility.md).
	MaxBackups int `yaml:"max_backups" json:"max_backups"`
	// MaxBackupSize bounds each of those backups, in MiB; 0: the server's
	// disk limit plus 1/64 and 1 MiB for the archive's own overhead (no
	// bound for a server without a disk limit).
	MaxBackupSize int `yaml:"max_backup_size" json:"max_backup_size"`
}

// Docker configures the container runtime.
type Docker struct {
	Network           DockerNetwork           `yaml:"network" json:"network"`
	Domainname        string                  `yaml:"domainname" json:"domainname"`
	Registries        map[string]RegistryAuth `yaml:"registries" json:"registries"`
	TmpfsSize         int                     `yaml:"tmpfs_size" json:"tmpfs_size"` // MiB
	ContainerPidLimit int64                   `yaml:"container_pid_limit" json:"container_pid_limit"`
	InstallerLimits   InstallerLimits         `yaml:"installer_limits" json:"installer_limits"`
	Overhead          Overhead                `yaml:"overhead" json:"overhead"`
	UsernsMode        string                  `yaml:"userns_mode" json:"userns_mode"`
	LogConfig         LogConfig               `yaml:"log_config" json:"log_config"`
	// SystemIPs are addresses the node is reached at that are not on its
	// interfaces (failover, NAT), added to GET /api/system/ips for the
	// panel's allocation wizard (Pelican Wings' key).
	SystemIPs []string `yaml:"system_ips" json:"system_ips"`

	// Host is the engine's address (issue 37): "unix:///var/run/docker.sock",
	// "unix:///run/podman/podman.sock" (rootful Podman's Docker-compatible
	// socket), "unix:///run/user/<uid>/podman/podman.sock" (rootless Podman)
	// or "tcp://host:port". Empty: DOCKER_HOST, else Docker's default socket.
	Host string `yaml:"host" json:"host"`

	// RootlessCgroupV1Accepted lets Wharf start servers on a rootless
	// engine on a cgroup v1 host, where the engine silently drops every
	// memory, CPU and process limit. Off: Wharf refuses to start servers
	// there, naming the reason.
	RootlessCgroupV1Accepted bool `yaml:"rootless_cgroup_v1_accepted" json:"rootless_cgroup_v1_accepted"`

	// RootlessWithoutFirewallAccepted lets Wharf start servers on a
	// rootless engine, whose bridge lives in the engine's own network
	// namespace and leaves through slirp4netns: Wharf's firewall
	// (neighbour isolation, blocked destinations, force_outgoing_ip)
	// does not see that traffic. Off: Wharf refuses, naming the reason.
	RootlessWithoutFirewallAccepted bool `yaml:"rootless_without_firewall_accepted" json:"rootless_without_firewall_accepted"`
}

// DockerNetwork configures the node's container network.
type DockerNetwork struct {
	Interface  string   `yaml:"interface" json:"interface"`
	DNS        []string `yaml:"dns" json:"dns"`
	Name       string   `yaml:"name" json:"name"`
	ISPN       bool     `yaml:"ispn" json:"ispn"`
	Driver     string   `yaml:"driver" json:"driver"`
	Mode       string   `yaml:"network_mode" json:"network_mode"`
	IsInternal bool     `yaml:"is_internal" json:"is_internal"`
	// EnableICC lets containers on the node's bridge reach each other
	// directly (off by default: a server reaches another only through the
	// ports it published, as a player does). Wharf's firewall enforces
	// it whatever option the engine's network was created with.
	EnableICC bool `yaml:"enable_icc" json:"enable_icc"`
	// ICCDefaultApplied records that Wharf's secure default of EnableICC
	// has been applied to this file (ApplyICCDefault): until it is set, an
	// enable_icc: true is another agent's default (Wings writes it) or an
	// older Wharf's, not the operator's choice.
	ICCDefaultApplied bool              `yaml:"icc_default_applied" json:"icc_default_applied"`
	NetworkMTU        int               `yaml:"network_mtu" json:"network_mtu"`
	Interfaces        NetworkInterfaces `yaml:"interfaces" json:"interfaces"`
	EnableIPv6        bool              `yaml:"ipv6" json:"ipv6"`
	BridgeName        string            `yaml:"bridge_name" json:"bridge_name"`
	// Firewall installs Wharf's own nftables rules for the bridge
	// (internal/firewall): neighbours isolated unless EnableICC, private
	// destinations blocked. On by default; servers do not start while the
	// rules cannot be installed. Off only for a host without nf_tables.
	Firewall bool `yaml:"firewall" json:"firewall"`
	// BlockedDestinations are CIDRs (or single addresses) containers must
	// not reach, on top of the link-local and cloud metadata addresses the
	// firewall always blocks (a management VLAN, the provider's services).
	BlockedDestinations []string `yaml:"blocked_destinations" json:"blocked_destinations"`
}

// ApplyICCDefault applies Wharf's secure default of enable_icc to a
// configuration that has not been through it yet (a file taken over from
// Wings, which writes enable_icc: true, or written by an older Wharf): ICC
// is turned off and the file marked, so that an operator who sets it to
// true again afterwards keeps it. It reports whether ICC was turned off.
func (c *Config) ApplyICCDefault() bool {
	n := &c.Docker.Network
	if n.ICCDefaultApplied {
		return false
	}
	n.ICCDefaultApplied = true
	reset := n.EnableICC
	n.EnableICC = false
	return reset
}

// NetworkInterfaces holds the v4 and v6 address plans.
type NetworkInterfaces struct {
	V4 Subnet `yaml:"v4" json:"v4"`
	V6 Subnet `yaml:"v6" json:"v6"`
}

// Subnet is a subnet and its gateway.
type Subnet struct {
	Subnet  string `yaml:"subnet" json:"subnet"`
	Gateway string `yaml:"gateway" json:"gateway"`
}

// RegistryAuth holds credentials for one image registry.
type RegistryAuth struct {
	Username string `yaml:"username" json:"username"`
	Password string `yaml:"password" json:"password"`
}

// InstallerLimits are the minimum limits of installer containers.
type InstallerLimits struct {
	Memory int64 `yaml:"memory" json:"memory"` // MB
	CPU    int64 `yaml:"cpu" json:"cpu"`       // percent
}

// Overhead configures the memory overhead multiplier.
type Overhead struct {
	Override          bool              `yaml:"override" json:"override"`
	DefaultMultiplier float64           `yaml:"default_multiplier" json:"default_multiplier"`
	Multipliers       map[int64]float64 `yaml:"multipliers" json:"multipliers"`
}

// LogConfig selects the container log driver.
type LogConfig struct {
	Type   string            `yaml:"type" json:"type"`
	Config map[string]string `yaml:"config" json:"config"`
}

// Throttles configures the console output throttle.
type Throttles struct {
	Enabled           bool  `yaml:"enabled" json:"enabled"`
	Lines             int   `yaml:"lines" json:"lines"`
	LineResetInterval int64 `yaml:"line_reset_interval" json:"line_reset_interval"` // ms
}

// RemoteQuery configures calls to the backend.
type RemoteQuery struct {
	Timeout            int `yaml:"timeout" json:"timeout"` // seconds
	BootServersPerPage int `yaml:"boot_servers_per_page" json:"boot_servers_per_page"`
	// CustomHeaders are sent on every call to the backend (an access
	// proxy's credentials, e.g. Cloudflare Access); Pelican Wings' key.
	// Secret: never logged, redacted in diagnostics.
	CustomHeaders map[string]string `yaml:"custom_headers,omitempty" json:"custom_headers,omitempty"`
}
