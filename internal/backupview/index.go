package backupview

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/chunkstore"
)

// The stored index (issue 35 follow-up, "the first listing"): at backup
// time, after the manifest is committed, the backup job writes the
// backup's listings beside it (chunkstore.PutViewIndex), so that the first
// listing of a backup after a start of the daemon (or after its tree left
// the cache) reads only the directory asked for, not the manifest and the
// chunks no indexed file covers. Backups without one (made before it, or
// cut by a crash between the manifest and the index) are listed as before.
//
// Layout: two objects (chunkstore.PutViewIndex). The table
// (views/<server>/<backup>): a header of indexHeader bytes (magic, the
// manifest object's modification time as the listing shows it), then one
// entry a directory, sorted by path: its path, mode, mtime, and its
// listing's offset and length in the second object. The listings
// (views/<server>/<backup>.dirs): each directory's entries as List returns
// them (a later name of a file already resolved): name, mode, size, mtime,
// link target. A listing reads the table whole and one directory's
// listing: two reads. An index whose manifest time is not the listed one
// (a backup made again under its UUID) is not used.
const (
	indexMagic  = "WVIDX02\n"
	indexHeader = 8 + 8
	// maxIndexTable bounds the table (about 30 bytes a directory): a
	// backup with more directories gets no index and is listed from its
	// manifest.
	maxIndexTable = 64 << 20
)

var errBadIndex = errors.New("view index damaged")

// maxIndexEntries bounds the entries of a backup whose listings are stored
// at backup time: building them holds the backup's whole tree (~0.5 KiB an
// entry), and a backup's memory must not grow with the number of files
// (issue 33 item 4: 200,000 empty files). The 1 GiB game-server tree has
// ~33,000; a backup of more is listed from its manifest, as before.
const maxIndexEntries = 50_000

// WriteIndex builds and stores the view index of backup m of st, just
// committed (the manifest Commit returned: it is not read again). Its cost
// is one build of the tree (reading the chunks no indexed file covers), at
// backup time.
// A backup of more than maxIndexEntries entries gets none.
func WriteIndex(ctx context.Context, st *chunkstore.Store, m chunkstore.Manifest) error {
	mod, err := backupTime(ctx, st, m.Server, m.Backup)
	if err != nil {
		return err
	}
	t, err := buildTreeAtMost(st, m, maxIndexEntries)
	if errors.Is(err, errTooManyEntries) {
		return nil // listed from its manifest, as a backup without an index
	}
	if err != nil {
		return err
	}
	table, dirs := encodeIndex(t, mod)
	if len(table) > maxIndexTable {
		return nil // listed from its manifest
	}
	return st.PutViewIndex(ctx, m.Server, m.Backup, table, dirs)
}

func encodeIndex(t *tree, mod time.Time) (table, dirs []byte) {
	names := make([]string, 0, len(t.kids)+1)
	for rel, n := range t.nodes {
		if n.isDir() {
			names = append(names, rel)
		}
	}
	slices.Sort(names)
	table = make([]byte, indexHeader, indexHeader+len(names)*32)
	copy(table, indexMagic)
	binary.LittleEndian.PutUint64(table[8:], uint64(mod.UnixNano()))
	dirs = make([]byte, 0, len(t.nodes)*40)
	for _, d := range names {
		off := len(dirs)
		for _, k := range t.kids[d] {
			i := infoOf(t.resolve(k))
			dirs = appendString(dirs, i.name)
			dirs = binary.AppendUvarint(dirs, uint64(i.mode))
			dirs = binary.AppendVarint(dirs, i.size)
			dirs = binary.AppendVarint(dirs, i.mtime.UnixNano())
			dirs = appendString(dirs, i.Target)
		}
		n := t.nodes[d]
		table = appendString(table, d)
		table = binary.AppendUvarint(table, uint64(n.mode))
		table = binary.AppendVarint(table, n.mtime.UnixNano())
		table = binary.AppendUvarint(table, uint64(off))
		table = binary.AppendUvarint(table, uint64(len(dirs)-off))
	}
	return table, dirs
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// indexDir is a directory of a stored index.
type indexDir struct {
	info     Info
	off, len int64
}

// storedDir finds the directory rel of backup in its stored index: ok false
// when there is no usable index (none, not this manifest's, damaged) and
// the caller builds the tree; found false when the index says rel is no
// directory of the backup (the caller's tree says what it is).
func storedDir(ctx context.Context, st *chunkstore.Store, server, backup, rel string, mod time.Time) (d indexDir, found, ok bool) {
	b, err := st.ViewIndex(ctx, server, backup)
	if err != nil || len(b) > maxIndexTable {
		return indexDir{}, false, false
	}
	return findIndexDir(b, mod, rel)
}

// findIndexDir checks the table b against the manifest's time mod and
// finds rel in it, without allocating for the directories it passes.
func findIndexDir(b []byte, mod time.Time, rel string) (d indexDir, found, ok bool) {
	if len(b) < indexHeader || string(b[:8]) != indexMagic || int64(binary.LittleEndian.Uint64(b[8:])) != mod.UnixNano() {
		return indexDir{}, false, false
	}
	b = b[indexHeader:]
	for len(b) > 0 {
		var name []byte
		var mode, off, n uint64
		var mt int64
		var k int
		if name, b, ok = cutString(b); !ok {
			return indexDir{}, false, false
		}
		if mode, k = binary.Uvarint(b); k <= 0 {
			return indexDir{}, false, false
		}
		b = b[k:]
		if mt, k = binary.Varint(b); k <= 0 {
			return indexDir{}, false, false
		}
		b = b[k:]
		if off, k = binary.Uvarint(b); k <= 0 {
			return indexDir{}, false, false
		}
		b = b[k:]
		if n, k = binary.Uvarint(b); k <= 0 {
			return indexDir{}, false, false
		}
		b = b[k:]
		if off > 1<<50 || n > 1<<50 || mode > 1<<32-1 || !fs.FileMode(mode).IsDir() {
			return indexDir{}, false, false
		}
		if string(name) == rel {
			return indexDir{info: Info{name: path.Base(rel), mode: fs.FileMode(mode), mtime: time.Unix(0, mt)},
				off: int64(off), len: int64(n)}, true, true
		}
	}
	return indexDir{}, false, true
}

// cutString splits a length-prefixed string off b.
func cutString(b []byte) (s, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, false
	}
	return b[k : k+int(n)], b[k+int(n):], true
}

// storedList reads the entries of d.
func storedList(ctx context.Context, st *chunkstore.Store, server, backup string, d indexDir) ([]Info, error) {
	if d.len == 0 {
		return []Info{}, nil
	}
	b, err := st.ViewIndexDirs(ctx, server, backup, d.off, d.len)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != d.len {
		return nil, errBadIndex
	}
	return parseIndexBlock(b)
}

// parseIndexBlock decodes a directory's block.
func parseIndexBlock(b []byte) ([]Info, error) {
	r := bytes.NewReader(b)
	out := []Info{}
	for r.Len() > 0 {
		name, e1 := readString(r)
		mode, e2 := binary.ReadUvarint(r)
		size, e3 := binary.ReadVarint(r)
		mt, e4 := binary.ReadVarint(r)
		target, e5 := readString(r)
		if errors.Join(e1, e2, e3, e4, e5) != nil || name == "" || name == "." || name == ".." || strings.Contains(name, "/") || mode > 1<<32-1 {
			return nil, errBadIndex
		}
		out = append(out, Info{name: name, mode: fs.FileMode(mode), size: size, mtime: time.Unix(0, mt), Target: target})
	}
	return out, nil
}

func readString(r *bytes.Reader) (string, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return "", err
	}
	if n > uint64(r.Len()) {
		return "", errBadIndex
	}
	b := make([]byte, n)
	if _, err := r.Read(b); err != nil && n > 0 {
		return "", err
	}
	return string(b), nil
}
