package config

// BackupDownloads bounds the signed downloads of repository backups, whose
// tar.gz is generated while it is sent (docs/security.md, "Repository
// backup downloads"): each holds a bounded buffer, so the node holds at most
// MaxPerNode of them, a server MaxPerServer, and one whose client stops
// reading is ended after StallTimeout.
type BackupDownloads struct {
	// MaxPerServer downloads of one server's repository backups run at
	// once; one more is answered 429.
	MaxPerServer int `yaml:"max_per_server" json:"max_per_server"`
	// MaxPerNode downloads of repository backups run at once on the node;
	// one more is answered 503.
	MaxPerNode int `yaml:"max_per_node" json:"max_per_node"`
	// StallTimeout is how many seconds a download may wait for its client
	// to take more bytes before it is cut off.
	StallTimeout int `yaml:"stall_timeout" json:"stall_timeout"`
}

// defaultBackupDownloads: a handful per server, 32 per node (at most ~8 MiB
// each), two minutes of a client that reads nothing.
func defaultBackupDownloads() BackupDownloads {
	return BackupDownloads{MaxPerServer: 4, MaxPerNode: 32, StallTimeout: 120}
}

// validateBackupDownloads checks system.backups.downloads.
func validateBackupDownloads(d BackupDownloads, bad func(key, why string)) {
	const key = "system.backups.downloads."
	if d.MaxPerServer < 1 || d.MaxPerServer > 1024 {
		bad(key+"max_per_server", "must be from 1 to 1024")
	}
	if d.MaxPerNode < 1 || d.MaxPerNode > 4096 {
		bad(key+"max_per_node", "must be from 1 to 4096")
	}
	if d.StallTimeout < 1 || d.StallTimeout > 86400 {
		bad(key+"stall_timeout", "must be from 1 to 86400 (seconds)")
	}
}
