package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// The denylist through ancestors. A denied name is protected from the
// operations that act on it through a directory above it, not only from
// those that name it: renaming or moving, removing (RemoveAll) and
// chmod-ing a directory is refused with ErrDenied when something below it
// is denied, as the same operation on the denied file itself is. Without
// this, renaming "config" to "moved" would make "moved/license.key"
// readable, and deleting "config" would delete the denied file.
//
// A rename is also refused when it would give an entry below the moved
// directory a denied name (moving "staging" holding license.key to
// "vault" when "vault/license.key" is denied): that writes a denied name,
// which a write or a rename of a file to that name is refused for too.
//
// The check walks the subtree (its cost is the subtree's size, which a
// removal pays anyway) unless no
// pattern of the denylist can match anything at or below the names
// involved (mayDenyWithin), which is decided from the patterns alone.

// checkDenyTree refuses (ErrDenied) an operation op on the entry rel when
// an entry at or below it is denied under its current name, given or real
// (in-root links on the way to rel followed, as the operation follows
// them), or, for a rename (to is not ""), would be denied under its new
// name. The walk stops with ctx; a subtree it cannot read refuses the
// operation with the walk's error, and so does a name that leads out of
// the root (ErrOutsideRoot, as the operation would answer).
func (f *FS) checkDenyTree(ctx context.Context, op, rel, to string) error {
	if f.trusted {
		return nil
	}
	d := f.s.deny.Load()
	if d == nil {
		return nil
	}
	denied, _, err := f.s.scanDenyTree(ctx, d, rel, to)
	switch {
	case err != nil:
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return wrap(op, rel, err)
	case denied:
		return newErr(op, rel, ErrDenied)
	}
	return nil
}

// scanDenyTree reports whether an entry at or below rel is denied under
// one of the names the operation gives it (see checkDenyTree), and how
// many entries it looked at (0 when the patterns alone settled it).
func (s *state) scanDenyTree(ctx context.Context, d *denylist, rel, to string) (denied bool, visited int, err error) {
	root := rel
	if real, ok := s.entryName(rel); ok {
		root = real
	}
	bases := []string{rel}
	if root != rel {
		bases = append(bases, root)
	}
	if to != "" {
		bases = append(bases, to)
		if real, ok := s.resolve(to); ok && real != to {
			bases = append(bases, real)
		}
	}
	if !slices.ContainsFunc(bases, d.mayDenyWithin) {
		return false, 0, nil
	}
	err = s.walk(ctx, root, 0, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNotDir) {
				return nil // missing, or gone meanwhile: nothing of it is moved
			}
			return err
		}
		visited++
		suffix := below(root, p)
		for _, b := range bases {
			if d.match(joinRel(b, suffix)) {
				denied = true
				return fs.SkipAll
			}
		}
		return nil
	})
	return denied, visited, err
}

// entryName is the name, relative to the root, of the entry rel itself:
// in-root links on the way to it are followed, a link at rel is not (a
// rename, a removal or a chmod acts on the link). false when the way
// leaves the root.
func (s *state) entryName(rel string) (string, bool) {
	if rel == "." {
		return ".", true
	}
	dir, base := split(rel)
	realDir, ok := s.resolve(dir)
	if !ok {
		return "", false
	}
	return joinRel(realDir, base), true
}

// below is the name of p relative to root, a name p lies at or below ("."
// for root itself).
func below(root, p string) string {
	if root == "." {
		return p
	}
	if p == root {
		return "."
	}
	return strings.TrimPrefix(p, root+"/")
}

// joinRel joins two cleaned relative names, either of which may be ".".
func joinRel(a, b string) string {
	switch {
	case b == ".":
		return a
	case a == ".":
		return b
	}
	return a + "/" + b
}

// mayDenyWithin reports whether some pattern could match rel, something
// below it, or one of its parents, judging from the patterns alone. It
// errs towards true: false means that no name at or below rel can be
// denied, so no walk is needed.
func (d *denylist) mayDenyWithin(rel string) bool {
	if d == nil {
		return false
	}
	if d.anywhere {
		return true
	}
	var parts []string
	if rel != "." {
		parts = strings.Split(rel, "/")
	}
	for _, p := range d.anchored {
		if mayMeet(p, parts) {
			return true
		}
	}
	return false
}

// mayMeet reports whether the anchored pattern (its components from the
// root) could match the name parts, a name below it or one of its parents:
// every component they both have must match, and "**" (which can span any
// number of components) is taken as a match of everything after it.
func mayMeet(pattern, parts []string) bool {
	i := 0
	for _, c := range pattern {
		switch {
		case c == "":
			continue // a leading "/", or "//": consumes no component
		case strings.Contains(c, "**"):
			return true
		case i == len(parts):
			return true // the pattern goes on below the name
		}
		ok, err := path.Match(c, parts[i])
		if err != nil {
			return true
		}
		if !ok {
			return false
		}
		i++
	}
	return true // it matches the name or one of its parents
}

// patternScope sorts a denylist line (already trimmed of "\r", not blank,
// not a comment) the way gitignore.ParsePattern reads it: a negation ("!")
// can only re-include, so it denies nothing (skip); a pattern without a
// "/" (once a trailing one is dropped) matches a name at any depth
// (anywhere); any other is anchored at the root and split into its
// components.
func patternScope(line string) (parts []string, anywhere, skip bool) {
	if strings.HasPrefix(line, "!") {
		return nil, false, true
	}
	if !strings.HasSuffix(line, "\\ ") {
		line = strings.TrimRight(line, " ")
	}
	line = strings.TrimSuffix(line, "/")
	if !strings.Contains(line, "/") {
		return nil, true, false
	}
	return strings.Split(line, "/"), false, false
}
