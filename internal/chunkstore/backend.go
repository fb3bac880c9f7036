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

// Stager is what a Backend may add so that a commit's objects are written
// and made durable at the same time, then made visible one by one in the
// order the repository needs (a pack before the index naming it, the index
// before the manifest): on a disk each Put waits for its own syncs, which
// Stage lets overlap. A Backend whose Put is atomic and durable by itself
// (an S3 PUT) has no need of it.
type Stager interface {
	// Stage stores data durably where no reader sees it (a List leaves it
	// out, an Open of the repository after a crash removes it).
	Stage(ctx context.Context, name string, data []byte) (Staged, error)
}

// Staged is an object Stage stored.
type Staged interface {
	// Publish makes it the object name, durably: after a crash it is
	// there whole, as after a Put.
	Publish() error
	// Discard removes it unpublished.
	Discard()
}
