package sandbox

import (
	"io/fs"
	"strings"
)

// The reference resolution the tests compare resolveWalk with: each
// component Lstat'ed through the root (quadratic in the depth, which is why
// the daemon does not use it).

// resolveInRoot follows the symbolic links on rel the way os.Root does, to
// find which name inside the root an operation would really touch, so that
// a link cannot be used to reach a denied file under another name. Missing
// components are kept literally. ok is false when the walk leaves the root,
// loops, or fails; the operation itself is then refused by os.Root anyway.
func (s *state) resolveInRoot(rel string) (string, bool) {
	if rel == "." {
		return ".", true
	}
	todo := strings.Split(rel, "/")
	var done []string
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", false
			}
			done = done[:len(done)-1]
			continue
		}
		cand := strings.Join(append(done[:len(done):len(done)], c), "/")
		fi, err := s.root.Lstat(cand)
		if err != nil {
			// Missing (or unreadable): the rest is taken literally.
			done = append(done, c)
			done = append(done, todo...)
			return strings.Join(done, "/"), true
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		hops++
		if hops > 40 {
			return "", false
		}
		target, err := s.root.Readlink(cand)
		if err != nil || strings.HasPrefix(target, "/") {
			return "", false
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	if len(done) == 0 {
		return ".", true
	}
	return strings.Join(done, "/"), true
}
