// Package archive builds and extracts the gzip-compressed tar archives of
// server files used by backups and transfers.
//
// Write streams a tar.gz of a server's sandbox into any io.Writer: it walks
// the tree through the sandbox (never following a symbolic link; links are
// stored as links with their stored target), keeps directories (empty ones
// too) and modes, applies gitignore-syntax ignore patterns, compresses with
// parallel gzip on every core and computes the SHA-1 and the size of the
// archive while writing, in one pass. It can end the archive with an
// integrity entry (ManifestName) listing the SHA-1 of every file.
//
// Backups use the tree-trailer layout (WriteOptions.TreeTrailer), so that
// Wings can restore them after a node is switched back (docs/compatibility.md):
//
//	gzip( tar(regular files only, parents implied) ++ tar(directories,
//	      symbolic links, integrity entry) )
//
// Wings' restore writes every entry it reads as a regular file and stops at
// the first end-of-archive marker, as Go's archive/tar and GNU tar do: it
// sees only the files, with their contents, modes and times. Extract reads
// on past the marker and applies the trailer, restoring empty directories,
// directory modes and times, and links, and checks the integrity entry.
// Archives of the older layout (everything in one tar stream) and archives
// made by Wings (files only) extract the same way.
//
// Extract streams a tar.gz from any io.Reader into a sandbox: it overwrites
// existing files, keeps permissions (never setuid, setgid or sticky) and
// modification times, refuses entries that would escape the root, skips
// device and FIFO entries, throttles its writes when asked, reports each
// entry as it goes, and verifies the integrity entry when it finds one.
package archive

import (
	"errors"
	"fmt"

	"github.com/klauspost/pgzip"
)

// ManifestName is the integrity entry at the end of an archive made with
// WriteOptions.Manifest. Its lines are "<sha1 hex>  <name>\n" (sha1sum
// format, with sha1sum's backslash escaping for names holding a newline or
// a backslash), one per regular file, in archive order. Extract never
// writes it to the destination.
const ManifestName = ".backup.checksum"

// Compression levels.
const (
	LevelNone            = pgzip.NoCompression
	LevelBestSpeed       = pgzip.BestSpeed
	LevelBestCompression = pgzip.BestCompression
)

// ParseLevel maps system.backups.compression_level to a gzip level: "none",
// "best_compression", and anything else (the default "best_speed") to the
// fastest level.
func ParseLevel(s string) int {
	switch s {
	case "none":
		return LevelNone
	case "best_compression":
		return LevelBestCompression
	}
	return LevelBestSpeed
}

// ErrUnsafeEntry is returned by Extract for an entry that would be written
// outside the destination root: an absolute name, a name with "..", a name
// below a symbolic link of the same archive, or a hard link to such a name.
var ErrUnsafeEntry = errors.New("archive entry leads outside the server root")

// ErrChecksumMismatch is returned by Extract when an extracted file does not
// match the archive's integrity entry.
var ErrChecksumMismatch = errors.New("archive integrity check failed")

// ErrCorrupt wraps read errors of the gzip or tar stream (a corrupt or
// truncated archive).
var ErrCorrupt = errors.New("archive is corrupt or truncated")

type entryError struct {
	name string
	err  error
}

func (e *entryError) Error() string { return fmt.Sprintf("%s: %v", e.name, e.err) }
func (e *entryError) Unwrap() error { return e.err }
