package config

import "path/filepath"

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
}
