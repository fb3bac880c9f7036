package archive

import (
	"errors"
	"io/fs"
	"strings"

	"github.com/wharf/wharf/internal/sandbox"
)

// maxHeld bounds the directory descriptors an extraction holds (the root
// included), so that a tree thousands of levels deep cannot exhaust the
// process's descriptors.
const maxHeld = 64

// dirLevel is one directory on the path of the current entry.
type dirLevel struct {
	name string       // relative to the root ("." for the root)
	d    *sandbox.Dir // nil while closed to save descriptors
	id   sandbox.DirID
}

// dirStack holds open the directories from the root down to the parent of
// the entry being extracted, so that an entry costs one system call per
// new name instead of a walk from the root: archives list a directory's
// entries after it, depth first, and consecutive entries share most of
// their path. At most maxHeld levels are open: the root and the deepest
// ones (levels[lo:]); a closed level is reopened through the ".." of its
// open child, checked to be the same directory, or else by name.
type dirStack struct {
	x      *extractor
	levels []dirLevel
	lo     int // levels[1:lo] are closed
}

func newDirStack(x *extractor) (*dirStack, error) {
	root, err := x.dst.OpenDir(".")
	if err != nil {
		return nil, err
	}
	return &dirStack{x: x, levels: []dirLevel{{name: ".", d: root}}, lo: 1}, nil
}

func (st *dirStack) close() {
	st.popTo(0)
	_ = st.levels[0].d.Close()
}

// within reports whether rel is dir or lies below it.
func within(dir, rel string) bool {
	if dir == "." {
		return true
	}
	return rel == dir || (strings.HasPrefix(rel, dir) && rel[len(dir)] == '/')
}

// popTo closes the levels above k.
func (st *dirStack) popTo(k int) {
	for i := len(st.levels) - 1; i > k; i-- {
		if d := st.levels[i].d; d != nil {
			_ = d.Close()
		}
	}
	st.levels = st.levels[:k+1]
	st.lo = min(st.lo, k+1)
}

// enter returns the open directory dir (cleaned; "." is the root), making
// the missing directories on the way when create is set. A link or a
// non-directory in the way is replaced by a directory (never followed),
// unless it is a link this archive made: the entry is then unsafe. Without
// create, a missing directory or anything else in the way is ErrNotExist.
func (st *dirStack) enter(dir string, create bool) (*sandbox.Dir, error) {
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
func (st *dirStack) reopen(k int) {
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
	// Moved meanwhile: start again from the root; enter walks down by name.
	st.popTo(0)
}

// down opens (making it when create is set) the entry rel of top, a
// single name below it, and pushes it.
func (st *dirStack) down(top *sandbox.Dir, rel string, create bool) error {
	x := st.x
	base := rel[strings.LastIndexByte(rel, '/')+1:]
	if x.links[rel] {
		return x.unsafe(rel)
	}
	d, err := top.Sub(base)
	if err != nil && create {
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case errors.Is(err, sandbox.ErrNotDir):
			// A file or link in the way (not one of the archive's).
			err = top.Remove(base)
		}
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			if err = top.Mkdir(base, 0o755); err == nil || errors.Is(err, fs.ErrExist) {
				d, err = top.Sub(base)
			}
		}
	}
	if err != nil {
		return x.wrap(rel, err)
	}
	st.push(dirLevel{name: rel, d: d})
	return nil
}

// push adds a level, closing the shallowest open one (but the root) when
// maxHeld would be passed; its identity is kept to reopen it through "..".
func (st *dirStack) push(l dirLevel) {
	st.levels = append(st.levels, l)
	open := 1 + len(st.levels) - st.lo
	if open <= maxHeld {
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
		old.id = sandbox.DirID{}
	}
	st.lo++
}
