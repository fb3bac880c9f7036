package backupview

import (
	"archive/tar"
	"errors"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/chunkstore"
)

// A tree is what a backup holds, built once from its manifest and kept in
// the view's small cache:
//
//   - the regular files the manifest indexes (nearly all of them) come
//     from the index alone: path, size, mtime, mode and their chunks;
//   - everything else is in the chunks no indexed file covers: the
//     headers of empty files, files changed while they were read (stored,
//     not indexed), and the tree trailer (directories, symbolic links,
//     later names of a file). Those runs of chunks are complete tar
//     entries (each segment of the stream is chunked on its own), so only
//     they are read and parsed, never the files' contents.
type tree struct {
	m       chunkstore.Manifest
	created time.Time
	starts  []int64 // starts[i]: offset of chunk i in the stream; starts[len] = size
	nodes   map[string]*node
	limit   int                // buildTreeAtMost: the most entries built before giving up (0: no limit)
	over    bool               // more than limit entries were met
	kids    map[string][]*node // directory path ("." the root) → entries, by name
}

// node is one entry of a backup.
type node struct {
	rel   string // path in the backup ("." the root)
	mode  fs.FileMode
	size  int64
	mtime time.Time
	link  string // symbolic link target
	hard  string // a later name of the file at hard (read as it)
	alias string // resolved from a later name: the first name, whose content it is
	entry int64  // offset of its tar entry in the stream (regular files); -1 none
	end   int64  // end of its tar entry
}

func (n *node) isDir() bool { return n.mode.IsDir() }

// errTooManyEntries: buildTreeAtMost met more entries than its limit.
var errTooManyEntries = errors.New("the backup holds too many entries to index")

// buildTreeAtMost indexes backup m of st, and gives up (errTooManyEntries)
// past limit entries, so that what it holds stays bounded (0: no limit).
func buildTreeAtMost(st *chunkstore.Store, m chunkstore.Manifest, limit int) (*tree, error) {
	t := &tree{m: m, created: m.Created, nodes: map[string]*node{}, kids: map[string][]*node{}, limit: limit}
	t.starts = make([]int64, len(m.Chunks)+1)
	for i, c := range m.Chunks {
		t.starts[i+1] = t.starts[i] + c.Len
	}
	t.nodes["."] = &node{rel: ".", mode: fs.ModeDir | 0o755, mtime: m.Created, entry: -1}
	covered := make([]bool, len(m.Chunks))
	for _, f := range m.Files {
		rel, ok := cleanStored(f.Path)
		if !ok {
			continue
		}
		for i := f.First; i < f.First+f.Count; i++ {
			covered[i] = true
		}
		t.add(&node{rel: rel, mode: fs.FileMode(f.Mode & 0o777), size: f.Size, mtime: time.Unix(0, f.MtimeNs),
			entry: t.starts[f.First], end: t.starts[f.First+f.Count]})
		if t.over {
			return nil, errTooManyEntries
		}
	}
	for i := 0; i < len(m.Chunks); {
		if covered[i] {
			i++
			continue
		}
		j := i
		for j < len(m.Chunks) && !covered[j] {
			j++
		}
		if err := t.parseRun(st, i, j); err != nil {
			return nil, err
		}
		if t.over {
			return nil, errTooManyEntries
		}
		i = j
	}
	for dir := range t.kids {
		slices.SortFunc(t.kids[dir], func(a, b *node) int { return strings.Compare(a.rel, b.rel) })
	}
	return t, nil
}

// parseRun reads the tar entries of chunks [i, j).
func (t *tree) parseRun(st *chunkstore.Store, i, j int) error {
	rd := st.ChunkReader(t.m.Chunks[i:j])
	defer rd.Close()
	cr := &counter{r: rd}
	base, size := t.starts[i], t.starts[j]-t.starts[i]
	var prev *node
	for cr.n < size {
		n0 := cr.n
		tr := tar.NewReader(cr)
		for {
			// Entries start on a block: the padding of the previous one
			// is read by this Next.
			start := (cr.n + 511) / 512 * 512
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if prev != nil {
				prev.end = base + start
			}
			if _, err := io.Copy(io.Discard, tr); err != nil {
				return err
			}
			prev = t.addHeader(h, base+start)
			if t.over {
				return errTooManyEntries
			}
		}
		if cr.n == n0 {
			break
		}
	}
	if prev != nil {
		prev.end = base + size
	}
	return nil
}

// addHeader adds the entry of h, which starts at start of the stream; it
// returns the regular file added, whose end the caller sets.
func (t *tree) addHeader(h *tar.Header, start int64) *node {
	rel, ok := cleanStored(h.Name)
	if !ok || rel == "." {
		return nil
	}
	if !t.m.Bare && rel == ".backup.checksum" {
		return nil // the integrity entry of an older stream
	}
	n := &node{rel: rel, mode: fs.FileMode(h.Mode & 0o777), size: h.Size, mtime: h.ModTime, entry: -1}
	switch h.Typeflag {
	case tar.TypeDir:
		n.mode |= fs.ModeDir
		n.size = 0
	case tar.TypeSymlink:
		n.mode, n.link, n.size = fs.ModeSymlink|0o777, h.Linkname, int64(len(h.Linkname))
	case tar.TypeLink:
		target, ok := cleanStored(h.Linkname)
		if !ok {
			return nil
		}
		n.hard = target
	case tar.TypeReg, tar.TypeGNUSparse:
		n.entry = start
	default:
		return nil
	}
	t.add(n)
	if n.entry < 0 {
		return nil
	}
	return n
}

// add inserts n, with its missing parent directories; a directory entry
// of the trailer replaces the implied one (its mode and time).
func (t *tree) add(n *node) {
	if old, ok := t.nodes[n.rel]; ok {
		if old.isDir() && n.isDir() {
			old.mode, old.mtime = n.mode, n.mtime
		}
		return
	}
	t.nodes[n.rel] = n
	if t.limit > 0 && len(t.nodes) > t.limit {
		t.over = true
	}
	dir := parent(n.rel)
	t.kids[dir] = append(t.kids[dir], n)
	if _, ok := t.nodes[dir]; !ok {
		t.add(&node{rel: dir, mode: fs.ModeDir | 0o755, mtime: t.created, entry: -1})
	}
}

// resolve is the node a hard link names (itself otherwise).
func (t *tree) resolve(n *node) *node {
	if n.hard == "" {
		return n
	}
	if to, ok := t.nodes[n.hard]; ok && to.hard == "" && to.mode.IsRegular() {
		return &node{rel: n.rel, mode: to.mode, size: to.size, mtime: to.mtime, entry: to.entry, end: to.end, alias: to.rel}
	}
	return n
}

// chunksOf returns the chunks that hold [from, to) of the stream and the
// offset of the first one.
func (t *tree) chunksOf(from, to int64) ([]chunkstore.Chunk, int64) {
	i, _ := slices.BinarySearch(t.starts, from+1)
	i--
	j, _ := slices.BinarySearch(t.starts, to)
	return t.m.Chunks[i:j], t.starts[i]
}

func parent(rel string) string {
	if d := path.Dir(rel); d != "" {
		return d
	}
	return "."
}

// cleanStored checks a name stored in a backup: relative, with no ".."
// and no NUL (the walk never stores others; a damaged or hostile stream
// could).
func cleanStored(name string) (string, bool) {
	name = strings.TrimSuffix(name, "/")
	if name == "" || strings.HasPrefix(name, "/") || strings.IndexByte(name, 0) >= 0 {
		return "", false
	}
	c := path.Clean(name)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", false
	}
	return c, true
}

// counter counts the bytes read through it.
type counter struct {
	r io.Reader
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
