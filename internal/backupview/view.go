// Package backupview is the read-only folder of a server's backups (issue
// 35): at the root of every server's file tree, a virtual directory
// (system.backups.browse_directory, ".backups") holds one directory per
// backup of the server in the backup repository, named by the backup's
// UUID, with the server's tree as it was in that backup. It is never on
// disk: the faces (httpapi, sftpd) take a branch to it for the paths under
// it. Files are read by the repository chunks that hold them (a few
// decoded chunks per open file, never the whole backup); the denylist of
// the server applies to every path inside, links are reported as links
// and never followed, and names are checked as the sandbox checks them.
package backupview

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/usererr"
)

// Source is where the view finds the repository: the store and the name of
// the view's directory, or a nil store when the view is off (browsing
// disabled, backups not in a repository, no repository yet).
type Source func() (st *chunkstore.Store, dir string)

// cachedTrees is how many backups' indexes the view keeps: a listing of
// a backup's directories builds one (about 300 bytes a file) the first
// time; the few last used stay.
const cachedTrees = 4

// View is the backups folder of every server of a node.
type View struct {
	src   Source
	mu    sync.Mutex
	trees []cachedTree // most recent first
	// indexed counts the lookups a stored index answered (tests).
	indexed atomic.Int64
}

type cachedTree struct {
	key string
	t   *tree
}

// New returns the view over src.
func New(src Source) *View { return &View{src: src} }

// Errors of the view shown to the user.
var (
	// ErrReadOnly: a change inside the view.
	ErrReadOnly = usererr.New(usererr.Forbidden, "The backups folder is read-only: to restore a file or a folder, move (rename) it out of the backups folder.")
	// ErrLink: a symbolic link of a backup is never followed.
	ErrLink = usererr.New(usererr.Invalid, "Symbolic links stored in a backup are not followed.")
	// ErrTooLarge: a backup of more than maxViewEntries entries.
	ErrTooLarge = usererr.New(usererr.TooLarge, "This backup holds more than 100,000 files and folders: it is too large to browse. Restore it whole instead.")
	// ErrIntoView: a rename onto a name inside the view.
	ErrIntoView = usererr.New(usererr.Forbidden, "Nothing can be moved into the backups folder: it is read-only.")
)

// Path is a name split against the view: In says it is inside the view;
// Backup is the backup's UUID ("" the view's root) and Rel the path in
// that backup ("." its root).
type Path struct {
	In     bool
	Backup string
	Rel    string
}

// Files is what the view reads of a server's own files: whether a name is
// taken on disk and the egg's denylist. A server's read-only view
// (sandbox.ReadOnly) and a job's *sandbox.FS are both; only CopyOut writes,
// through a job's *sandbox.FS.
type Files interface {
	Lstat(name string) (fs.FileInfo, error)
	Denied(name string) bool
}

// Split places name (a user's path, relative to the server's root)
// against the view of fsys's server. The view is off when a real entry of
// its name exists at the root: the real entry stays reachable as it is.
func (v *View) Split(fsys Files, name string) (Path, error) {
	if v == nil {
		return Path{}, nil
	}
	st, dir := v.src()
	if st == nil || dir == "" {
		return Path{}, nil
	}
	c, ok := cleanUser(name)
	if !ok {
		return Path{}, nil // the sandbox refuses it as it does any such name
	}
	first, rest, _ := strings.Cut(c, "/")
	if first != dir {
		return Path{}, nil
	}
	if _, err := fsys.Lstat(dir); err == nil {
		return Path{}, nil
	}
	backup, rel, _ := strings.Cut(rest, "/")
	if rel == "" {
		rel = "."
	}
	return Path{In: true, Backup: backup, Rel: rel}, nil
}

// Active reports whether the view shows for fsys's server: its name, ""
// when it does not.
func (v *View) Active(fsys Files) string {
	if v == nil {
		return ""
	}
	st, dir := v.src()
	if st == nil || dir == "" {
		return ""
	}
	if _, err := fsys.Lstat(dir); err == nil {
		return ""
	}
	return dir
}

// open finds the tree of backup of server (ErrNotExist when the server has
// no such backup: a deleted backup leaves the view at once).
func (v *View) open(ctx context.Context, server, backup string) (*chunkstore.Store, *tree, error) {
	st, _ := v.src()
	if st == nil {
		return nil, nil, sandbox.ErrNotExist
	}
	if _, err := backupTime(ctx, st, server, backup); err != nil {
		return nil, nil, err
	}
	if t := v.cached(server, backup); t != nil {
		return st, t, nil
	}
	return v.build(st, server, backup)
}

// backupTime is the modification time of the manifest of backup of server
// (ErrNotExist when the server has no such backup).
func backupTime(ctx context.Context, st *chunkstore.Store, server, backup string) (time.Time, error) {
	bs, err := st.Backups(ctx, server)
	if err != nil {
		return time.Time{}, err
	}
	for _, b := range bs {
		if b.Backup == backup {
			return b.ModTime, nil
		}
	}
	return time.Time{}, sandbox.ErrNotExist
}

// cached is the cached tree of backup of server, nil when it is not.
func (v *View) cached(server, backup string) *tree {
	key := server + "/" + backup
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, c := range v.trees {
		if c.key == key {
			copy(v.trees[1:i+1], v.trees[:i])
			v.trees[0] = c
			return c.t
		}
	}
	return nil
}

// maxViewEntries bounds the entries of a backup the view builds a tree of
// (~0.5 KiB an entry, and the last cachedTrees trees are kept): a server
// that made millions of empty files cannot make browsing its backups cost
// the node gigabytes. Such a backup is restored whole.
const maxViewEntries = 100_000

// build builds the tree of backup of server from its manifest and caches
// it.
func (v *View) build(st *chunkstore.Store, server, backup string) (*chunkstore.Store, *tree, error) {
	key := server + "/" + backup
	m, err := st.Manifest(server, backup)
	if errors.Is(err, chunkstore.ErrNotFound) {
		return nil, nil, sandbox.ErrNotExist
	}
	if err != nil {
		return nil, nil, err
	}
	t, err := buildTreeAtMost(st, m, maxViewEntries)
	if errors.Is(err, errTooManyEntries) {
		return nil, nil, ErrTooLarge
	}
	if err != nil {
		return nil, nil, err
	}
	v.mu.Lock()
	if len(v.trees) < cachedTrees {
		v.trees = append(v.trees, cachedTree{})
	}
	copy(v.trees[1:], v.trees[:len(v.trees)-1])
	v.trees[0] = cachedTree{key, t}
	v.mu.Unlock()
	return st, t, nil
}

// Info describes an entry of the view (fs.FileInfo, lstat's: a link is a
// link).
type Info struct {
	name  string
	size  int64
	mode  fs.FileMode
	mtime time.Time
	// Target is a symbolic link's target (data only: never followed).
	Target string
}

func (i Info) Name() string       { return i.name }
func (i Info) Size() int64        { return i.size }
func (i Info) Mode() fs.FileMode  { return i.mode }
func (i Info) ModTime() time.Time { return i.mtime }
func (i Info) IsDir() bool        { return i.mode.IsDir() }
func (i Info) Sys() any           { return nil }

func infoOf(n *node) Info {
	return Info{name: path.Base(n.rel), size: n.size, mode: n.mode, mtime: n.mtime, Target: n.link}
}

// lookup finds p's node, with the name rules applied to its path in the
// backup. As on the live tree, the denylist refuses reading and copying
// (Open, CopyOut: denied), never the metadata (Stat, List).
func (v *View) lookup(ctx context.Context, fsys Files, server string, p Path) (*chunkstore.Store, *tree, *node, error) {
	st, t, err := v.open(ctx, server, p.Backup)
	if err != nil {
		return nil, nil, nil, err
	}
	rel := path.Clean(p.Rel)
	if strings.HasPrefix(rel, "../") || rel == ".." || rel == "/" {
		return nil, nil, nil, sandbox.ErrOutsideRoot
	}
	n, ok := t.nodes[rel]
	if !ok {
		return nil, nil, nil, sandbox.ErrNotExist
	}
	return st, t, t.resolve(n), nil
}

// Stat describes p (a link as a link).
func (v *View) Stat(ctx context.Context, fsys Files, server string, p Path) (Info, error) {
	if p.Backup == "" {
		return Info{name: path.Base("/" + v.Active(fsys)), mode: fs.ModeDir | 0o555, mtime: time.Now()}, nil
	}
	if d, ok := v.fromIndex(ctx, server, p); ok {
		if d.info.name == "." {
			d.info.name = p.Backup
		}
		return d.info, nil
	}
	_, t, n, err := v.lookup(ctx, fsys, server, p)
	if err != nil {
		return Info{}, err
	}
	i := infoOf(n)
	if n.rel == "." {
		i.name, i.mtime = p.Backup, t.created
	}
	return i, nil
}

// List describes the entries of the directory p, by name: the backups of
// the server (by UUID, dated when they were made) at the view's root.
func (v *View) List(ctx context.Context, fsys Files, server string, p Path) ([]Info, error) {
	if p.Backup == "" {
		return v.listBackups(ctx, server)
	}
	if d, ok := v.fromIndex(ctx, server, p); ok {
		st, _ := v.src()
		if st != nil {
			if out, err := storedList(ctx, st, server, p.Backup, d); err == nil {
				return out, nil
			}
		}
	}
	_, t, n, err := v.lookup(ctx, fsys, server, p)
	if err != nil {
		return nil, err
	}
	if !n.isDir() {
		return nil, sandbox.ErrNotDir
	}
	kids := t.kids[n.rel]
	out := make([]Info, 0, len(kids))
	for _, k := range kids {
		out = append(out, infoOf(t.resolve(k)))
	}
	return out, nil
}

// fromIndex finds the directory p in the stored index of its backup when
// its tree is not cached (a cached tree answers at once); ok false when
// the caller goes the tree's way: no such directory in the index (the
// tree says what p is), no usable index, or an error (the tree's way
// reports it).
func (v *View) fromIndex(ctx context.Context, server string, p Path) (indexDir, bool) {
	st, _ := v.src()
	if st == nil || v.cached(server, p.Backup) != nil {
		return indexDir{}, false
	}
	rel := path.Clean(p.Rel)
	if strings.HasPrefix(rel, "../") || rel == ".." || strings.HasPrefix(rel, "/") {
		return indexDir{}, false
	}
	mod, err := backupTime(ctx, st, server, p.Backup)
	if err != nil {
		return indexDir{}, false
	}
	d, found, ok := storedDir(ctx, st, server, p.Backup, rel, mod)
	if !ok || !found {
		return indexDir{}, false
	}
	v.indexed.Add(1)
	return d, true
}

// IndexedLookups is how many Stat and List calls the stored indexes
// answered (tests).
func (v *View) IndexedLookups() int64 { return v.indexed.Load() }

func (v *View) listBackups(ctx context.Context, server string) ([]Info, error) {
	st, _ := v.src()
	if st == nil {
		return nil, sandbox.ErrNotExist
	}
	bs, err := st.Backups(ctx, server)
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(bs))
	for _, b := range bs {
		out = append(out, Info{name: b.Backup, mode: fs.ModeDir | 0o555, mtime: b.ModTime})
	}
	return out, nil
}

// Open opens the regular file p for reading. A directory is ErrIsDir, a
// link ErrLink.
func (v *View) Open(ctx context.Context, fsys Files, server string, p Path) (*File, error) {
	if p.Backup == "" {
		return nil, sandbox.ErrIsDir
	}
	st, t, n, err := v.lookup(ctx, fsys, server, p)
	if err != nil {
		return nil, err
	}
	if denied(fsys, n) {
		return nil, sandbox.ErrDenied
	}
	switch {
	case n.isDir():
		return nil, sandbox.ErrIsDir
	case n.mode&fs.ModeSymlink != 0:
		return nil, ErrLink
	case n.hard != "":
		return nil, sandbox.ErrNotExist // a later name whose first name is not in the backup
	}
	return openFile(st, t, n, infoOf(n))
}

// denied says the denylist refuses reading n (or, for a later name of a
// file, the name it shares the content with).
func denied(fsys Files, n *node) bool {
	return n.rel != "." && fsys.Denied(n.rel) || n.alias != "" && fsys.Denied(n.alias)
}

// cleanUser cleans a user's name as the sandbox does (relative to the
// root, "." components and repeated slashes dropped, ".." resolved); false
// for a name that climbs above the root or holds a NUL.
func cleanUser(name string) (string, bool) {
	rel, err := sandbox.CleanName(name)
	switch {
	case err != nil:
		return "", false
	case rel == ".":
		return "", true
	}
	return rel, true
}
