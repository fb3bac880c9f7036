package config

import (
	"net/url"
	"path"
	"path/filepath"
	"strings"
)

// The formats of local backups (system.backups.format).
const (
	// BackupFormatArchive keeps each backup as its own tar.gz, as Wings.
	BackupFormatArchive = "archive"
	// BackupFormatRepository keeps backups in a deduplicating repository
	// (docs/backup-repository.md).
	BackupFormatRepository = "repository"
)

// BackupRepository is where the repository of system.backups.format:
// repository lives.
type BackupRepository struct {
	// Path of the repository; empty = <backup_directory>/.repository.
	Path string `yaml:"path" json:"path"`
	// S3, when its bucket is set, puts the repository in an S3 bucket
	// instead of Path (docs/backup-repository.md).
	S3 BackupRepositoryS3 `yaml:"s3" json:"s3"`
	// DedupScope is what a backup deduplicates against: "server" (the
	// default: the server's own backups only, so that no server learns
	// whether another holds a file) or "node" (every backup of the node:
	// less space, but the backup's speed tells a server owner whether a
	// file is on another server; docs/security.md).
	DedupScope string `yaml:"dedup_scope" json:"dedup_scope"`
	// MaxUnusedPercent is the share of the repository's pack bytes that
	// deleted backups may leave unused before the garbage collection
	// repacks the packs with the most unused bytes (restic's
	// --max-unused); 0 repacks every pack with an unused byte. Default 5.
	MaxUnusedPercent int `yaml:"max_unused_percent" json:"max_unused_percent"`
	// Shared lets several nodes back up into this one repository (the
	// same bucket and prefix): leases in the repository keep each node's
	// collection off what the others need (docs/backup-repository.md,
	// "Shared repository across nodes"). Default false: a node refuses a
	// repository another node claimed.
	Shared bool `yaml:"shared" json:"shared"`
}

// The values of system.backups.repository.dedup_scope.
const (
	DedupScopeServer = "server"
	DedupScopeNode   = "node"
)

// NodeWideDedup reports whether dedup_scope is node.
func (r BackupRepository) NodeWideDedup() bool { return r.DedupScope == DedupScopeNode }

// BackupRepositoryS3 is a repository in a bucket of an S3-compatible
// object store.
type BackupRepositoryS3 struct {
	// Endpoint is the store's URL (https://minio.example.com:9000); empty
	// means AWS S3 in Region.
	Endpoint string `yaml:"endpoint" json:"endpoint"`
	Bucket   string `yaml:"bucket" json:"bucket"`
	// Prefix is prepended to every object name ("wharf/"), so that one
	// bucket can hold other things or several repositories.
	Prefix string `yaml:"prefix" json:"prefix"`
	// Region signs the requests; empty = us-east-1.
	Region      string `yaml:"region" json:"region"`
	AccessKeyID string `yaml:"access_key_id" json:"access_key_id"`
	// SecretAccessKey: never logged, redacted in diagnostics.
	SecretAccessKey string `yaml:"secret_access_key" json:"secret_access_key"`
	// PathStyle addresses the bucket as <endpoint>/<bucket> rather than
	// <bucket>.<endpoint> (MinIO, versitygw, Ceph without wildcard DNS).
	PathStyle bool `yaml:"path_style" json:"path_style"`
	// MaxAttempts of a request that fails with a 5xx, a throttling answer
	// or a broken connection; 0 = 5. A 4xx is never retried.
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"`
}

// Enabled reports whether the repository is in a bucket.
func (s BackupRepositoryS3) Enabled() bool { return s.Bucket != "" }

// EffectiveRegion is Region, or us-east-1 when it is empty (what MinIO and
// versitygw accept by default).
func (s BackupRepositoryS3) EffectiveRegion() string {
	if s.Region == "" {
		return "us-east-1"
	}
	return s.Region
}

// BackupFormat is the effective format of new local backups.
func (c *Config) BackupFormat() string {
	if c.System.Backups.Format == "" {
		return BackupFormatArchive
	}
	return c.System.Backups.Format
}

// BackupRepositoryPath is the effective directory of the repository.
func (c *Config) BackupRepositoryPath() string {
	if p := c.System.Backups.Repository.Path; p != "" {
		return p
	}
	return filepath.Join(c.System.BackupDirectory, ".repository")
}

// validateBackupFormat checks system.backups.format and .repository.
func (c *Config) validateBackupFormat(bad func(key, why string)) {
	switch c.System.Backups.Format {
	case "", BackupFormatArchive, BackupFormatRepository:
	default:
		bad("system.backups.format", "must be one of archive, repository")
	}
	if p := c.System.Backups.Repository.Path; p != "" && !filepath.IsAbs(p) {
		bad("system.backups.repository.path", "must be an absolute path")
	}
	validateRepositoryS3(c.System.Backups.Repository.S3, bad)
	switch c.System.Backups.Repository.DedupScope {
	case "", DedupScopeServer, DedupScopeNode:
	default:
		bad("system.backups.repository.dedup_scope", "must be one of server, node")
	}
	if r := c.System.Backups.Repository; r.Shared && !r.S3.Enabled() && r.Path == "" {
		bad("system.backups.repository.shared", "needs a repository other nodes reach: set system.backups.repository.s3 (or .path on a shared file system)")
	}
	if p := c.System.Backups.Repository.MaxUnusedPercent; p < 0 || p > 50 {
		bad("system.backups.repository.max_unused_percent", "must be from 0 to 50")
	}
}

// validateRepositoryS3 checks system.backups.repository.s3: nothing when
// neither endpoint nor bucket is set (the repository is a directory).
func validateRepositoryS3(s BackupRepositoryS3, bad func(key, why string)) {
	const key = "system.backups.repository.s3."
	if s.Endpoint == "" && s.Bucket == "" {
		return
	}
	if s.Bucket == "" {
		bad(key+"bucket", "is required when endpoint is set")
	} else if why := bucketNameProblem(s.Bucket); why != "" {
		bad(key+"bucket", why)
	}
	if s.Endpoint != "" {
		if err := validateHTTPURL(s.Endpoint); err != nil {
			bad(key+"endpoint", err.Error())
		} else if u, _ := url.Parse(s.Endpoint); u.RawQuery != "" || u.User != nil || (u.Path != "" && u.Path != "/") {
			bad(key+"endpoint", "must be the store's base URL (scheme, host and port only)")
		}
	}
	if s.AccessKeyID == "" || s.SecretAccessKey == "" {
		bad(key+"access_key_id", "access_key_id and secret_access_key are both required")
	}
	if p := s.Prefix; p != "" && (strings.HasPrefix(p, "/") || path.Clean("/"+p) != "/"+strings.TrimSuffix(p, "/")) {
		bad(key+"prefix", "must be a relative slash-separated path without . or .. or empty parts (wharf/repository/)")
	}
	if s.MaxAttempts < 0 || s.MaxAttempts > 20 {
		bad(key+"max_attempts", "must be from 0 (default, 5) to 20")
	}
}

// bucketNameProblem says why name is not an S3 bucket name, or "".
func bucketNameProblem(name string) string {
	if len(name) < 3 || len(name) > 63 {
		return "must be 3 to 63 characters long"
	}
	for _, r := range name {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '.' {
			return "may hold only lower-case letters, digits, hyphens and dots"
		}
	}
	if strings.Contains(name, "..") || strings.Trim(name, "-.") != name {
		return "must start and end with a letter or digit, without two dots in a row"
	}
	return ""
}
