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
// Layout: a header of indexHeader bytes (magic, the manifest object's
// modification time as the listing shows it, the table's offset and
// length), the directories' blocks, then the table. The table has one
// entry a directory, sorted by path: its path, mode, mtime, and its
// block's offset and length. A block is the directory's entries as List
// returns them (a later name of a file already resolved): name, mode,
// size, mtime, link target. An index whose manifest time is not the
// listed one (a backup made again under its UUID) is not used.
const (
	indexMagic  = "WVIDX01\n"
	indexHeader = 8 + 8 + 8 + 8
	// maxIndexTable bounds the table read (about 30 bytes a directory):
	// a backup with more directories is listed from its manifest.
	maxIndexTable = 64 << 20
)

var errBadIndex = errors.New("view index damaged")

// WriteIndex builds and stores the view index of backup of server (a
// backup just committed). Its cost is one build of the tree (reading the
// chunks no indexed file covers), at backup time.
func WriteIndex(ctx context.Context, st *chunkstore.Store, server, backup string) error {
	bs, err := st.Backups(ctx, server)
	if err != nil {
		return err
	}
	var mod time.Time
	found := false
	for _, b := range bs {
		if b.Backup == backup {
			mod, found = b.ModTime, true
		}
	}
	if !found {
		return chunkstore.ErrNotFound
	}
	m, err := st.Manifest(server, backup)
	if err != nil {
		return err
	}
	t, err := buildTree(st, m)
	if err != nil {
		return err
	}
	return st.PutViewIndex(ctx, server, backup, encodeIndex(t, mod))
}

func encodeIndex(t *tree, mod time.Time) []byte {
	dirs := make([]string, 0, len(t.kids)+1)
	for rel, n := range t.nodes {
		if n.isDir() {
			dirs = append(dirs, rel)
		}
	}
	slices.Sort(dirs)
	out := make([]byte, indexHeader, indexHeader+len(t.nodes)*40)
	copy(out, indexMagic)
	binary.LittleEndian.PutUint64(out[8:], uint64(mod.UnixNano()))
	var table []byte
	for _, d := range dirs {
		off := len(out)
		for _, k := range t.kids[d] {
			i := infoOf(t.resolve(k))
			out = appendString(out, i.name)
			out = binary.AppendUvarint(out, uint64(i.mode))
			out = binary.AppendVarint(out, i.size)
			out = binary.AppendVarint(out, i.mtime.UnixNano())
			out = appendString(out, i.Target)
		}
		n := t.nodes[d]
		table = appendString(table, d)
		table = binary.AppendUvarint(table, uint64(n.mode))
		table = binary.AppendVarint(table, n.mtime.UnixNano())
		table = binary.AppendUvarint(table, uint64(off))
		table = binary.AppendUvarint(table, uint64(len(out)-off))
	}
	binary.LittleEndian.PutUint64(out[16:], uint64(len(out)))
	binary.LittleEndian.PutUint64(out[24:], uint64(len(table)))
	return append(out, table...)
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
	h, err := st.ViewIndex(ctx, server, backup, 0, indexHeader)
	if err != nil {
		return indexDir{}, false, false
	}
	toff, tlen, ok := parseIndexHeader(h, mod)
	if !ok {
		return indexDir{}, false, false
	}
	table, err := st.ViewIndex(ctx, server, backup, toff, tlen)
	if err != nil {
		return indexDir{}, false, false
	}
	return findIndexDir(table, tlen, toff, rel)
}

// parseIndexHeader checks an index's header against the manifest's time
// mod and returns where its table is.
func parseIndexHeader(h []byte, mod time.Time) (toff, tlen int64, ok bool) {
	if len(h) != indexHeader || string(h[:8]) != indexMagic || int64(binary.LittleEndian.Uint64(h[8:])) != mod.UnixNano() {
		return 0, 0, false
	}
	off, n := binary.LittleEndian.Uint64(h[16:]), binary.LittleEndian.Uint64(h[24:])
	if n > maxIndexTable || off < indexHeader || off > 1<<50 {
		return 0, 0, false
	}
	return int64(off), int64(n), true
}

// findIndexDir finds rel in the table (tlen bytes, at toff of the index).
func findIndexDir(table []byte, tlen, toff int64, rel string) (d indexDir, found, ok bool) {
	if int64(len(table)) != tlen {
		return indexDir{}, false, false
	}
	r := bytes.NewReader(table)
	for r.Len() > 0 {
		name, e1 := readString(r)
		mode, e2 := binary.ReadUvarint(r)
		mt, e3 := binary.ReadVarint(r)
		off, e4 := binary.ReadUvarint(r)
		n, e5 := binary.ReadUvarint(r)
		if err := errors.Join(e1, e2, e3, e4, e5); err != nil || off < indexHeader || off > uint64(toff) || n > uint64(toff)-off ||
			!fs.FileMode(mode).IsDir() {
			return indexDir{}, false, false
		}
		if name == rel {
			return indexDir{info: Info{name: path.Base(rel), mode: fs.FileMode(mode), mtime: time.Unix(0, mt)},
				off: int64(off), len: int64(n)}, true, true
		}
	}
	return indexDir{}, false, true
}

// storedList reads the entries of d.
func storedList(ctx context.Context, st *chunkstore.Store, server, backup string, d indexDir) ([]Info, error) {
	if d.len == 0 {
		return []Info{}, nil
	}
	b, err := st.ViewIndex(ctx, server, backup, d.off, d.len)
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
