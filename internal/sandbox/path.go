package sandbox

import (
	"path"
	"strings"
)

// clean turns a user-supplied name into a cleaned name relative to the root:
// "" , "/" and "." are the root itself ("."); a leading "/" means the root;
// "." components and repeated or trailing slashes are dropped; ".." is
// resolved lexically and an attempt to climb above the root is refused with
// ErrOutsideRoot (never clamped). A NUL byte is refused too. The result never
// starts with "/" and never contains "..", so what reaches os.Root is a plain
// downward path; symbolic links on it are then resolved by os.Root, which
// refuses any that lead out of the root.
func clean(op, name string) (string, error) {
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
			out = append(out, p)
		}
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
