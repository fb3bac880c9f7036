package sandbox

import (
	"errors"
	"io/fs"
	"strings"
)

// MaxHeld bounds the directory descriptors a DirStack holds (the root
// included), so that a tree thousands of levels deep cannot exhaust the
// process's descriptors.
const MaxHeld = 64

// dirLevel is one directory on the path of the current entry.
type dirLevel struct {
	name string // relative to the root ("." for the root)
	d    *Dir   // nil while closed to save descriptors
	id   DirID
}

// DirStack holds open the directories from the root down to the parent of
// the entry being written, so that an entry costs one system call per new
// name instead of a walk from the root: archives and live streams send a
// directory's entries after it, depth first, and consecutive entries share
// most of their path. At most MaxHeld levels are open: the root and the
// deepest ones (levels[lo:]); a closed level is reopened through the ".."
// of its open child, checked to be the same directory, or else by name.
// Every level is opened by one name relative to its parent, never through
// a symbolic link.
type DirStack struct {
	// Check, when set, is asked before the directory rel is entered or
	// made; its error stops Enter (an archive's own links are refused).
	Check func(rel string) error
	// Removed, when set, is told of a file or link at rel removed to make
	// way for a directory.
	Removed func(rel string)

	levels []dirLevel
	lo     int // levels[1:lo] are closed
}

// NewDirStack opens the root of f as the bottom of a DirStack.
func (f *FS) NewDirStack() (*DirStack, error) {
	root, err := f.OpenDir(".")
	if err != nil {
		return nil, err
	}
	return &DirStack{levels: []dirLevel{{name: ".", d: root}}, lo: 1}, nil
}

// Close closes every held directory.
func (st *DirStack) Close() {
	st.popTo(0)
	_ = st.levels[0].d.Close()
}

// Leave closes the held levels at dir or below it (cleaned; "." leaves all
// but the root): to be called before dir is removed or replaced, since a
// handle on a removed directory would write where no path leads.
func (st *DirStack) Leave(dir string) {
	k := len(st.levels) - 1
	for k > 0 && within(dir, st.levels[k].name) {
		k--
	}
	st.popTo(k)
}

// within reports whether rel is dir or lies below it.
func within(dir, rel string) bool {
	if dir == "." {
		return true
	}
	return rel == dir || (strings.HasPrefix(rel, dir) && len(rel) > len(dir) && rel[len(dir)] == '/')
}

// popTo closes the levels above k.
func (st *DirStack) popTo(k int) {
	for i := len(st.levels) - 1; i > k; i-- {
		if d := st.levels[i].d; d != nil {
			_ = d.Close()
		}
	}
	st.levels = st.levels[:k+1]
	st.lo = min(st.lo, k+1)
}

// Enter returns the open directory dir (cleaned; "." is the root), making
// the missing directories on the way when create is set. A link or a
// non-directory in the way is then removed and replaced by a directory
// (never followed). Without create, a missing directory is ErrNotExist and
// anything else in the way ErrNotDir. The Dir stays owned by the stack:
// valid until the next Enter, Leave or Close.
func (st *DirStack) Enter(dir string, create bool) (*Dir, error) {
	k := len(st.levels) - 1
	for k > 0 && !within(st.levels[k].name, dir) {
		k--
	}
	st.reopen(k)
	for dir != st.levels[len(st.levels)-1].name {
		top := st.levels[len(st.levels)-1]
		rest := dir
		if top.name != "." {
			rest = dir[len(top.name)+1:]
		}
		end := len(dir) - len(rest) + strings.IndexByte(rest+"/", '/')
		if err := st.down(top.d, dir[:end], create); err != nil {
			return nil, err
		}
	}
	return st.levels[len(st.levels)-1].d, nil
}

// reopen makes levels[k] the open top of the stack: through the ".." of
// the shallowest open level above it while those are the same
// directories, else from the root by name (down, without creating).
func (st *DirStack) reopen(k int) {
	if k == 0 || st.levels[k].d != nil {
		st.popTo(k)
		return
	}
	for st.lo > k && st.lo < len(st.levels) {
		child := st.levels[st.lo].d
		up, err := child.Up(st.levels[st.lo-1].id)
		if err != nil {
			break
		}
		st.lo--
		st.levels[st.lo].d = up
	}
	if st.levels[k].d != nil {
		st.popTo(k)
		return
	}
	// Moved meanwhile: start again from the root; Enter walks down by name.
	st.popTo(0)
}

// down opens (making it when create is set) the entry rel of top, a
// single name below it, and pushes it.
func (st *DirStack) down(top *Dir, rel string, create bool) error {
	base := rel[strings.LastIndexByte(rel, '/')+1:]
	if st.Check != nil {
		if err := st.Check(rel); err != nil {
			return err
		}
	}
	d, err := top.Sub(base)
	if err != nil && create {
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case errors.Is(err, ErrNotDir):
			// A file or link in the way (a link is removed, not followed).
			if err = top.Remove(base); err == nil && st.Removed != nil {
				st.Removed(rel)
			}
		}
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			if err = top.Mkdir(base, 0o755); err == nil || errors.Is(err, fs.ErrExist) {
				d, err = top.Sub(base)
			}
		}
	}
	if err != nil {
		return err
	}
	st.push(dirLevel{name: rel, d: d})
	return nil
}

// push adds a level, closing the shallowest open one (but the root) when
// MaxHeld would be passed; its identity is kept to reopen it through "..".
func (st *DirStack) push(l dirLevel) {
	st.levels = append(st.levels, l)
	open := 1 + len(st.levels) - st.lo
	if open <= MaxHeld {
		return
	}
	old := &st.levels[st.lo]
	id, err := old.d.ID()
	_ = old.d.Close()
	old.d = nil
	if err == nil {
		old.id = id
	} else {
		// Unknown identity: never reopened through "..".
		old.id = DirID{}
	}
	st.lo++
}
