package sandbox

import (
	"path"
	"strings"
)

// Limits on the names a user may give, checked by clean before any
// filesystem work, so that a path costs at most a bounded, linear amount of
// work and an over-long one is refused with a 400 that names the limit.
const (
	// MaxPathLen is the longest name accepted, in bytes: the kernel's
	// PATH_MAX.
	MaxPathLen = 4096
	// MaxPathDepth is the most components a cleaned name may have (the
	// last one included): deeper trees are refused on every face.
	MaxPathDepth = 256
	// MaxNameLen is the longest single component, in bytes: the kernel's
	// NAME_MAX.
	MaxNameLen = 255
)

// clean is the package's clean for a name given to this view. The names
// of the trusted view come from the agent's own flows (a restore, a
// transfer, the egg's configuration files): they are cleaned and confined
// the same way, but not held to the path limits, so that a tree deeper than
// MaxPathDepth that the game made, and a backup captured, comes back whole.
func (f *FS) clean(op, name string) (string, error) {
	return cleanPath(op, name, !f.trusted)
}

// clean turns a user-supplied name into a cleaned name relative to the root:
// "" , "/" and "." are the root itself ("."); a leading "/" means the root;
// "." components and repeated or trailing slashes are dropped; ".." is
// resolved lexically and an attempt to climb above the root is refused with
// ErrOutsideRoot (never clamped). A NUL byte is refused too, and so are
// names beyond MaxPathLen, MaxPathDepth or MaxNameLen (ErrPathTooLong,
// ErrPathTooDeep, ErrNameTooLong), before anything else is looked at. The
// result never starts with "/" and never contains "..", so what reaches
// os.Root is a plain downward path; symbolic links on it are then resolved
// by os.Root, which refuses any that lead out of the root.
func clean(op, name string) (string, error) { return cleanPath(op, name, true) }

// CleanName is clean for a face that must name a path before it reaches
// the sandbox (a symbolic link's target, a name inside the backups folder):
// the same rules, the same errors, "." for the root.
func CleanName(name string) (string, error) { return clean("clean", name) }

// cleanWalked is clean without the path limits, for a name a walk reported
// (the walk found it in the tree: refusing it would leave it out of a
// backup or an archive, not protect anything).
func cleanWalked(op, name string) (string, error) { return cleanPath(op, name, false) }

func cleanPath(op, name string, limits bool) (string, error) {
	if limits && len(name) > MaxPathLen {
		return "", &Error{Op: op, Path: "(name too long)", Kind: ErrPathTooLong}
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", &Error{Op: op, Path: "(invalid name)", Kind: ErrOutsideRoot}
	}
	parts := strings.Split(name, "/")
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		switch p {
		case "", ".":
			continue
		case "..":
			if len(out) == 0 {
				return "", &Error{Op: op, Path: display(path.Clean("/" + name)[1:]), Kind: ErrOutsideRoot}
			}
			out = out[:len(out)-1]
		default:
			if limits && len(p) > MaxNameLen {
				return "", &Error{Op: op, Path: "(name too long)", Kind: ErrNameTooLong}
			}
			out = append(out, p)
		}
	}
	if limits && len(out) > MaxPathDepth {
		return "", &Error{Op: op, Path: "(path too deep)", Kind: ErrPathTooDeep}
	}
	if len(out) == 0 {
		return ".", nil
	}
	return strings.Join(out, "/"), nil
}

// split returns the parent directory and the base name of a cleaned name.
func split(rel string) (dir, base string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}
