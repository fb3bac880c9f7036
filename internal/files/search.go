package files

import (
	"context"
	"io/fs"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/wharf/wharf/internal/sandbox"
)

// Search bounds.
const (
	MinPatternLen    = 3
	MaxSearchDepth   = 10
	MaxSearchResults = 250
)

// skipDirs are directories a name search does not enter: dependency trees
// and tool caches that hold thousands of files no one searches for.
var skipDirs = map[string]bool{
	"node_modules": true, ".git": true, ".svn": true, ".hg": true, "vendor": true,
	"__pycache__": true, ".wine": true, "appcache": true, "depotcache": true,
}

// Search finds files and directories below dir whose name matches pattern
// (case-insensitive; a glob when it holds * ? or [, a substring otherwise),
// at most MaxSearchDepth levels deep and MaxSearchResults results. Links
// are reported, never followed. Each Stat's Name is the path relative to dir.
func (m *Reader) Search(ctx context.Context, dir, pattern string) ([]Stat, error) {
	pattern = strings.ToLower(strings.TrimSpace(pattern))
	if utf8.RuneCountInString(pattern) < MinPatternLen {
		return nil, ErrShortPattern
	}
	glob := strings.ContainsAny(pattern, "*?[")
	if glob {
		if _, err := path.Match(pattern, ""); err != nil {
			return nil, ErrBadPattern
		}
	}
	fi, err := m.FS.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, ErrNotDirectory
	}
	base := strings.TrimPrefix(path.Clean("/"+dir), "/")
	out := []Stat{}
	head := make([]byte, sniffLen)
	err = m.FS.WalkContext(ctx, dir, func(full string, d fs.DirEntry, err error) error {
		if err != nil {
			if full == base || (base == "" && full == ".") || !sandbox.Vanished(err) {
				return err // a part of the tree could not be read
			}
			return nil // removed or swapped during the walk
		}
		rel := full
		if base != "" {
			rel = strings.TrimPrefix(strings.TrimPrefix(full, base), "/")
		}
		if rel == "" || rel == "." {
			return nil
		}
		name := strings.ToLower(d.Name())
		if d.IsDir() && (skipDirs[name] || strings.Count(rel, "/") >= MaxSearchDepth) {
			return fs.SkipDir
		}
		match := strings.Contains(name, pattern)
		if glob {
			match, _ = path.Match(pattern, name)
		}
		if !match {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mime := MimeBinary
		switch {
		case d.IsDir():
			mime = MimeDirectory
		case info.Mode().IsRegular():
			mime = m.mimeOfEntry(info, head, full, d)
		}
		st := NewStat(info, mime)
		st.Name = rel
		out = append(out, st)
		if len(out) >= MaxSearchResults {
			return fs.SkipAll
		}
		return nil
	})
	if err != nil {
		return nil, unreadable(err, "the search was not finished.")
	}
	return out, nil
}
