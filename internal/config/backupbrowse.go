package config

import (
	"strings"
	"unicode"
)

// DefaultBrowseDirectory is the name of the backups folder (issue 35).
const DefaultBrowseDirectory = ".backups"

// validateBrowseDirectory checks system.backups.browse_directory: one
// plain name (no slash, not "." or "..", no control character, at most
// 255 bytes), since it is a name at the root of every server's tree.
func validateBrowseDirectory(name string, bad func(key, why string)) {
	const key = "system.backups.browse_directory"
	switch {
	case name == "":
		bad(key, "must be a directory name, "+DefaultBrowseDirectory+" by default")
	case name == "." || name == ".." || strings.ContainsRune(name, '/'):
		bad(key, "must be one name (no slash, not . or ..)")
	case len(name) > 255 || strings.IndexFunc(name, unicode.IsControl) >= 0 || strings.TrimSpace(name) != name:
		bad(key, "must be at most 255 bytes, without control characters or surrounding spaces")
	}
}

// BrowseBackups reports whether the backups folder shows: browsing on and
// new local backups in the repository.
func (c *Config) BrowseBackups() bool {
	return c.System.Backups.Browse && c.BackupFormat() == BackupFormatRepository
}
