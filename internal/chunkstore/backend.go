package chunkstore

import (
	"context"
	"time"
)

// Backend is where a repository's objects live: a directory on the node's
// disk or a bucket of an S3-compatible object store. Names are
// slash-separated relative paths (for example "packs/ab/<id>" or
// "snapshots/<server>/<backup>.json"); the repository chooses them.
type Backend interface {
	// Put stores data under name. The object appears whole or not at all,
	// and is durable when Put returns nil: the repository relies on the
	// order of its Puts to never name an object that is not stored.
	Put(ctx context.Context, name string, data []byte) error
	// Get returns length bytes from offset off of the object name, or
	// everything from off when length < 0. A missing object is an error
	// for which errors.Is(err, fs.ErrNotExist) holds.
	Get(ctx context.Context, name string, off, length int64) ([]byte, error)
	// List returns the objects whose names start with prefix, by name.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	// Delete removes the object name; a missing object is not an error.
	Delete(ctx context.Context, name string) error
}

// ObjectInfo is an object a Backend lists.
type ObjectInfo struct {
	Name    string
	Size    int64
	ModTime time.Time
}
