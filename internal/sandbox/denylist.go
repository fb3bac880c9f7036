package sandbox

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"golang.org/x/sys/unix"
)

// denylist is a compiled egg file_denylist (gitignore syntax: globs, "**",
// a leading "/" anchoring at the root, a trailing "/" for directories, "!"
// to re-include, "#" comments). A name is denied when it, or any of its
// parent directories, matches.
type denylist struct {
	m gitignore.Matcher
	// What the patterns can reach, for mayDenyWithin: anywhere when one
	// matches a name at any depth, else the components of each anchored one.
	anywhere bool
	anchored [][]string
}

func compileDenylist(lines []string) *denylist {
	m := CompilePatterns(lines)
	if m == nil {
		return nil
	}
	d := &denylist{m: m}
	for _, l := range patternLines(lines) {
		parts, anywhere, skip := patternScope(l)
		switch {
		case skip:
		case anywhere:
			d.anywhere = true
		default:
			d.anchored = append(d.anchored, parts)
		}
	}
	return d
}

// CompilePatterns compiles gitignore-syntax lines (blank lines and comments
// are skipped); nil when there are none. The denylist and the backup ignore
// lists share it, so both read patterns the same way.
func CompilePatterns(lines []string) gitignore.Matcher {
	var ps []gitignore.Pattern
	for _, l := range patternLines(lines) {
		ps = append(ps, gitignore.ParsePattern(l, nil))
	}
	if len(ps) == 0 {
		return nil
	}
	return gitignore.NewMatcher(ps)
}

// patternLines drops a trailing "\r" from each line, and blank lines and
// comments.
func patternLines(lines []string) []string {
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		l = strings.TrimRight(l, "\r")
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// match reports whether the cleaned relative name is denied. The root
// itself is never denied.
func (d *denylist) match(rel string) bool {
	if d == nil || rel == "." || rel == "" {
		return false
	}
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		if d.m.Match(parts[:i], true) {
			return true
		}
	}
	// The type of the last component is not known here (it may not exist
	// yet): deny if it matches either as a file or as a directory.
	return d.m.Match(parts, false) || d.m.Match(parts, true)
}

// resolve follows the symbolic links on rel the way os.Root does, to find
// which name inside the root an operation would really touch (so that a
// link cannot reach a denied file under another name), cheaply in the
// common case (writing many files, e.g. an extraction): the parent directory is opened once through
// the root (which follows in-root links the same way) and its real name read
// from the descriptor, instead of one Lstat (itself a walk from the root)
// per component. When the parent cannot be opened as a directory, the last
// component is itself a link, or the name is not below the root as /proc
// shows it, the component-by-component walk decides.
func (s *state) resolve(rel string) (string, bool) {
	if rel == "." {
		return ".", true
	}
	if res, ok := s.resolveParent(rel); ok {
		return res, true
	}
	return s.resolveWalk(rel)
}

func (s *state) resolveParent(rel string) (string, bool) {
	dir, base := split(rel)
	d := s.rootDir
	if dir != "." {
		// O_DIRECTORY|O_NONBLOCK: never open (and wait on) anything else.
		var err error
		d, err = s.root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return "", false
		}
		defer d.Close()
	}
	realDir, ok := s.fdRel(d)
	if !ok {
		return "", false
	}
	rc, err := d.SyscallConn()
	if err != nil {
		return "", false
	}
	var st unix.Stat_t
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.Fstatat(int(fd), base, &st, unix.AT_SYMLINK_NOFOLLOW)
	}); err != nil {
		return "", false
	}
	switch {
	case serr == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return "", false // the name is a link: follow it the slow way
	case serr != nil && !errors.Is(serr, unix.ENOENT):
		return "", false
	}
	if realDir == "." {
		return base, true
	}
	return realDir + "/" + base, true
}

// fdRel returns the name, relative to the root, of the file open as f, as
// the kernel sees it now (race-free: it is the file actually opened).
func (s *state) fdRel(f *os.File) (string, bool) {
	p, err := fdPath(f)
	if err != nil {
		return "", false
	}
	return s.pathRel(p)
}

// fdRelFD is fdRel of a raw descriptor.
func (s *state) fdRelFD(fd int) (string, bool) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", false
	}
	return s.pathRel(p)
}

// pathRel is the name below the root of the host path p, as the kernel
// names an open file.
func (s *state) pathRel(p string) (string, bool) {
	// The root's own path is cached (one readlink less per open); when it
	// does not match, it is read again in case the root moved.
	for fresh := false; ; fresh = true {
		rootPath := s.rootPath.Load()
		if rootPath == nil || fresh {
			rp, err := fdPath(s.rootDir)
			if err != nil {
				return "", false
			}
			rootPath = &rp
			s.rootPath.Store(rootPath)
		}
		if p == *rootPath {
			return ".", true
		}
		if strings.HasPrefix(p, *rootPath+"/") {
			return p[len(*rootPath)+1:], true
		}
		if fresh {
			return "", false
		}
	}
}

func fdPath(f *os.File) (string, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return "", err
	}
	var p string
	var lerr error
	if err := rc.Control(func(fd uintptr) {
		p, lerr = os.Readlink("/proc/self/fd/" + strconv.FormatUint(uint64(fd), 10))
	}); err != nil {
		return "", err
	}
	return p, lerr
}
