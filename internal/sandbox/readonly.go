package sandbox

import (
	"context"
	"io/fs"
)

// ReadOnly is a view of an FS that has only its reading methods: what
// server.Server.Files hands to anyone holding a server (issue 38 §2). A
// change to the files needs the writable *FS, which only a job of the
// server's job slot gives (server.Job.FS): through a ReadOnly the compiler
// refuses a write. Its files are opened for reading only (their writes
// fail). The zero value has no FS: every method panics.
type ReadOnly struct{ f *FS }

// ReadOnly returns the read-only view of f.
func (f *FS) ReadOnly() ReadOnly { return ReadOnly{f: f} }

// Trusted is the read-only view of f.Trusted (no denylist).
func (r ReadOnly) Trusted() ReadOnly { return ReadOnly{f: r.f.Trusted()} }

// Open opens name for reading (FS.Open).
func (r ReadOnly) Open(name string) (*File, error) { return r.f.Open(name) }

// ReadFile reads name whole, up to limit bytes (FS.ReadFile).
func (r ReadOnly) ReadFile(name string, limit int64) ([]byte, error) {
	return r.f.ReadFile(name, limit)
}

// Stat is FS.Stat.
func (r ReadOnly) Stat(name string) (fs.FileInfo, error) { return r.f.Stat(name) }

// Lstat is FS.Lstat.
func (r ReadOnly) Lstat(name string) (fs.FileInfo, error) { return r.f.Lstat(name) }

// Readlink is FS.Readlink.
func (r ReadOnly) Readlink(name string) (string, error) { return r.f.Readlink(name) }

// ReadDir is FS.ReadDir.
func (r ReadOnly) ReadDir(name string) ([]fs.DirEntry, error) { return r.f.ReadDir(name) }

// OpenDirReader is FS.OpenDirReader (a DirReader only reads).
func (r ReadOnly) OpenDirReader(name string) (*DirReader, error) { return r.f.OpenDirReader(name) }

// Walk is FS.Walk.
func (r ReadOnly) Walk(dir string, fn fs.WalkDirFunc) error { return r.f.Walk(dir, fn) }

// WalkContext is FS.WalkContext.
func (r ReadOnly) WalkContext(ctx context.Context, dir string, fn fs.WalkDirFunc) error {
	return r.f.WalkContext(ctx, dir, fn)
}

// WalkParallel is FS.WalkParallel.
func (r ReadOnly) WalkParallel(ctx context.Context, dir string, workers int, fn fs.WalkDirFunc) error {
	return r.f.WalkParallel(ctx, dir, workers, fn)
}

// Denied is FS.Denied.
func (r ReadOnly) Denied(name string) bool { return r.f.Denied(name) }

// DeniedEntry is FS.DeniedEntry.
func (r ReadOnly) DeniedEntry(rel string) bool { return r.f.DeniedEntry(rel) }

// DeniedWalkEntry is FS.DeniedWalkEntry.
func (r ReadOnly) DeniedWalkEntry(rel string, d fs.DirEntry) bool { return r.f.DeniedWalkEntry(rel, d) }

// ReadHead is FS.ReadHead.
func (r ReadOnly) ReadHead(rel string, d fs.DirEntry, buf []byte) (int, error) {
	return r.f.ReadHead(rel, d, buf)
}

// OpenEntry opens a walked entry for reading (FS.OpenEntry).
func (r ReadOnly) OpenEntry(rel string, d fs.DirEntry) (*File, error) { return r.f.OpenEntry(rel, d) }

// ReadlinkEntry is FS.ReadlinkEntry.
func (r ReadOnly) ReadlinkEntry(rel string, d fs.DirEntry) (string, error) {
	return r.f.ReadlinkEntry(rel, d)
}

// Usage is FS.Usage.
func (r ReadOnly) Usage() int64 { return r.f.Usage() }

// DiskLimit is FS.DiskLimit.
func (r ReadOnly) DiskLimit() int64 { return r.f.DiskLimit() }

// HasSpaceFor is FS.HasSpaceFor.
func (r ReadOnly) HasSpaceFor(delta int64) error { return r.f.HasSpaceFor(delta) }

// RefreshUsage recounts the disk usage (FS.RefreshUsage): a walk, no write.
func (r ReadOnly) RefreshUsage(ctx context.Context) (int64, error) { return r.f.RefreshUsage(ctx) }

// CountEntries is FS.CountEntries.
func (r ReadOnly) CountEntries(ctx context.Context) (int64, error) { return r.f.CountEntries(ctx) }
