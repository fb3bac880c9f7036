package chunkstore

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"
)

// Read-only helpers of the backup view (internal/backupview, issue 35):
// a backup's file is read by the chunks it lies in, never the whole
// stream.

// ReadChunk returns the plain bytes of chunk c of a backup, checked
// against its hash (a *ChunkError when it is missing or damaged).
func (s *Store) ReadChunk(c Chunk) ([]byte, error) { return s.readChunk(c, 0) }

// ChunkReader streams the plain bytes of cs in order, with the Reader's
// bounded read-ahead (coalesced ranged reads, at most readAhead bytes held
// ahead of the caller). The caller closes it.
func (s *Store) ChunkReader(cs []Chunk) io.ReadCloser {
	return s.readerWithin(Manifest{Chunks: cs}, newReadBudget(readAhead))
}

// BackupObject is one backup of a server as the repository lists it.
type BackupObject struct {
	Backup  string
	ModTime time.Time // when its manifest was stored: when the backup ended
}

// Backups lists the backups of server (their manifests' objects), by
// name, without reading the manifests.
func (s *Store) Backups(ctx context.Context, server string) ([]BackupObject, error) {
	objs, err := s.b.List(ctx, "snapshots/"+server+"/")
	if err != nil {
		return nil, err
	}
	var out []BackupObject
	for _, o := range objs {
		if srv, b, ok := manifestObject(o.Name); ok && srv == server {
			out = append(out, BackupObject{Backup: b, ModTime: o.ModTime})
		}
	}
	return out, nil
}

// ReadChunks returns the plain bytes of cs in order, read in the caller's
// goroutine by ranged reads that take neighbours in a pack together (at
// most limit bytes a read), each chunk checked against its hash: a
// sequential reader's next stretch, without the Reader's goroutines.
func (s *Store) ReadChunks(cs []Chunk, limit int64) ([][]byte, error) {
	out := make([][]byte, 0, len(cs))
	for _, g := range s.groups(cs, limit) {
		bs, errs := s.fetch(g)
		for i := range bs {
			if errs[i] != nil {
				return nil, errs[i]
			}
			out = append(out, bs[i])
		}
	}
	return out, nil
}

// A backup's view index (issue 35 follow-up, "the first listing"): the
// backups folder's directory listings of one backup, written by
// internal/backupview after the backup's manifest, so that listing a
// backup needs neither its manifest nor its chunks. It is two objects:
// views/<server>/<backup>.dirs, the directories' listings, and
// views/<server>/<backup>, the table naming them, stored in that order
// after the manifest (a crash in between leaves a backup without a table:
// the view builds its tree from the manifest, as for backups made before
// it) and deleted in the reverse order before the manifest (Delete); ones
// whose manifest is gone are removed by the GC.
func viewIndexName(server, backup string) string {
	return "views/" + server + "/" + backup
}

const viewDirsSuffix = ".dirs"

// PutViewIndex stores the view index of backup of server: its listings
// (dirs), then the table naming them. A backup deleted meanwhile keeps no
// index (it is removed again).
func (s *Store) PutViewIndex(ctx context.Context, server, backup string, table, dirs []byte) error {
	if s.readOnly {
		return errors.New("the repository is open read-only")
	}
	name := viewIndexName(server, backup)
	if err := s.b.Put(ctx, name+viewDirsSuffix, dirs); err != nil {
		return err
	}
	if err := s.b.Put(ctx, name, table); err != nil {
		return err
	}
	if !s.exists(manifestName(server, backup)) {
		_ = s.deleteViewIndex(ctx, server, backup)
		return ErrNotFound
	}
	return nil
}

func (s *Store) deleteViewIndex(ctx context.Context, server, backup string) error {
	name := viewIndexName(server, backup)
	if err := s.b.Delete(ctx, name); err != nil {
		return err
	}
	return s.b.Delete(ctx, name+viewDirsSuffix)
}

// ViewIndex reads the table of the view index of backup of server; an
// error for which errors.Is(err, fs.ErrNotExist) holds when the backup has
// none.
func (s *Store) ViewIndex(ctx context.Context, server, backup string) ([]byte, error) {
	return s.b.Get(ctx, viewIndexName(server, backup), 0, -1)
}

// ViewIndexDirs reads length bytes at off of the listings of the view
// index of backup of server.
func (s *Store) ViewIndexDirs(ctx context.Context, server, backup string, off, length int64) ([]byte, error) {
	return s.b.Get(ctx, viewIndexName(server, backup)+viewDirsSuffix, off, length)
}

// sweepViewIndexes deletes the view indexes whose backup has no manifest
// (a Delete cut between its deletes, a backup deleted while its index was
// written, a node of an older Wharf deleting a backup).
func (s *Store) sweepViewIndexes(ctx context.Context) error {
	views, err := s.b.List(ctx, "views/")
	if err != nil || len(views) == 0 {
		return err
	}
	snaps, err := s.b.List(ctx, "snapshots/")
	if err != nil {
		return err
	}
	have := make(map[string]struct{}, len(snaps))
	for _, o := range snaps {
		if srv, b, ok := manifestObject(o.Name); ok {
			have[viewIndexName(srv, b)] = struct{}{}
		}
	}
	for _, o := range views {
		if _, ok := have[strings.TrimSuffix(o.Name, viewDirsSuffix)]; !ok {
			if err := s.b.Delete(ctx, o.Name); err != nil {
				return err
			}
		}
	}
	return nil
}
