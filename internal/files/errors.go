// Package files is the file manager of one server: listing with Stat
// objects, reading, writing, renaming, copying, creating directories,
// deleting, changing modes, searching, compressing and decompressing, all
// on the server's sandbox. It knows nothing of HTTP; the errors a user may
// see are usererr errors with the panels' texts, and sandbox errors
// (missing, outside the root, denylisted, out of disk) pass through for the
// API layer to map.
//
// The rules themselves (confinement, the egg's denylist, the disk limit,
// no setuid bits, never following a link on chmod) live in the sandbox, so
// that SFTP and this package cannot differ on them.
package files

import "github.com/wharf/wharf/internal/usererr"

// Errors shown to the user (texts as the panels show Wings' ones).
var (
	ErrNoRenames       = usererr.New(usererr.Unprocessable, "No files to move or rename were provided.")
	ErrNoDeletes       = usererr.New(usererr.Unprocessable, "No files were specified for deletion.")
	ErrNoChmods        = usererr.New(usererr.Unprocessable, "No files were specified to change the mode of.")
	ErrNoCompress      = usererr.New(usererr.Unprocessable, "No files were specified for compression.")
	ErrDestExists      = usererr.New(usererr.Invalid, "Cannot move or rename file, destination already exists.")
	ErrBadMode         = usererr.New(usererr.Invalid, "Invalid file mode.")
	ErrSpecialBits     = usererr.New(usererr.Invalid, "Invalid file mode: setuid, setgid and sticky bits cannot be set.")
	ErrWriteOnDir      = usererr.New(usererr.Invalid, "Cannot write file, name conflicts with an existing directory by the same name.")
	ErrMkdirNotDir     = usererr.New(usererr.Invalid, "Part of the path being created is not a directory (ENOTDIR).")
	ErrDeleteRoot      = usererr.New(usererr.Invalid, "The root directory of the server cannot be deleted.")
	ErrFileType        = usererr.New(usererr.Invalid, "Cannot open files of this type.")
	ErrIsDirectory     = usererr.New(usererr.Invalid, "Cannot perform that action: file is a directory.")
	ErrNotDirectory    = usererr.New(usererr.Invalid, "Cannot perform that action: the path is not a directory.")
	ErrCopyType        = usererr.New(usererr.Invalid, "Only regular files can be copied.")
	ErrCompressSpace   = usererr.New(usererr.Conflict, "This server does not have enough available disk space to generate a compressed archive.")
	ErrNoSpace         = usererr.New(usererr.Invalid, "There is not enough disk space available to perform that action.")
	ErrUnknownFormat   = usererr.New(usererr.Invalid, "The archive provided is in a format Wharf does not understand.")
	ErrCorruptArchive  = usererr.New(usererr.Invalid, "The archive provided could not be read: it is corrupt or truncated.")
	ErrBadExtension    = usererr.New(usererr.Invalid, "The archive extension must be one of zip, tar, tar.gz, tgz, tar.bz2, tbz2, tar.xz, txz, tar.zst.")
	ErrBadArchiveName  = usererr.New(usererr.Invalid, "The archive name must be a plain file name.")
	ErrShortPattern    = usererr.New(usererr.Invalid, "The search pattern must be at least 3 characters long.")
	ErrBadPattern      = usererr.New(usererr.Invalid, "The search pattern is not a valid glob.")
	ErrMissingLength   = usererr.New(usererr.Invalid, "Missing Content-Length")
	ErrArchiveNotFound = usererr.New(usererr.NotFound, "The requested archive does not exist.")
)
