package chunkstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// Backups adopted from another node of a shared repository (issue 36,
// docs/backup-repository.md "Backups that travel as references"). A
// backup's manifest is snapshots/<server>/<backup>.json whichever node
// made it; when a server moves to another node sharing the repository, the
// target keeps its own copy of the manifest, snapshots/<server>/<backup>@<node>.json
// (<node> as in leases), so that the source deleting its copy (the
// canonical name) leaves the target's backup whole: the collector reads
// every manifest under snapshots/, so a chunk stays as long as either copy
// names it.

// adoptSep separates a backup's id from the node of an adopted copy.
const adoptSep = "@"

// nodeTag is node's name in lease and adoption objects.
func nodeTag(node string) string { return strings.TrimPrefix(NodeObject(node), nodesPrefix) }

// adoptedName is this node's name for its copy of backup, "" when the
// repository is not shared.
func (s *Store) adoptedName(backup string) string {
	sh := s.sharedMode()
	if sh == nil || strings.Contains(backup, adoptSep) {
		return ""
	}
	return backup + adoptSep + nodeTag(sh.node)
}

// ManifestRef resolves backup of server as it is stored: the name of its
// manifest (the backup's id, or this node's adopted copy's) and the
// manifest.
func (s *Store) ManifestRef(server, backup string) (string, Manifest, error) {
	m, err := s.manifestAt(server, backup)
	if errors.Is(err, ErrNotFound) {
		if a := s.adoptedName(backup); a != "" {
			m, err = s.manifestAt(server, a)
			return a, m, err
		}
	}
	return backup, m, err
}

// ReadManifestNamed reads the manifest stored under name for server (a
// backup's id or an adopted copy's name, as ManifestRef answers) with its
// bytes; ErrNotFound when there is none, or name is not a manifest's name.
func (s *Store) ReadManifestNamed(ctx context.Context, server, name string) ([]byte, Manifest, error) {
	if !validManifestPathPart(server) || !validManifestPathPart(name) {
		return nil, Manifest{}, ErrNotFound
	}
	b, err := s.b.Get(ctx, manifestName(server, name), 0, -1)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Manifest{}, ErrNotFound
	}
	if err != nil {
		return nil, Manifest{}, err
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, Manifest{}, fmt.Errorf("manifest %s: %w", name, err)
	}
	return b, m, nil
}

// validManifestPathPart is a server or manifest name that stays one path
// element.
func validManifestPathPart(s string) bool {
	return s != "" && s != "." && s != ".." && len(s) <= 200 && !strings.ContainsAny(s, "/\\\x00")
}

// Adopt stores raw, a manifest of backup of server read from another
// node's copy (ReadManifestNamed), as this node's copy. The repository
// must be shared; the manifest must parse and be backup's.
func (s *Store) Adopt(ctx context.Context, server, backup string, raw []byte) error {
	if s.readOnly {
		return errors.New("the repository is open read-only")
	}
	name := s.adoptedName(backup)
	if name == "" {
		return errors.New("adopting a backup needs a shared repository")
	}
	m, err := ParseManifest(raw)
	if err != nil {
		return err
	}
	if (m.Backup != "" && m.Backup != backup) || (m.Server != "" && m.Server != server) {
		return fmt.Errorf("the manifest is of backup %s of server %s, not of backup %s of server %s", m.Backup, m.Server, backup, server)
	}
	return s.b.Put(ctx, manifestName(server, name), raw)
}

// HasAdopted reports whether this node holds its own adopted copy of
// backup of server.
func (s *Store) HasAdopted(server, backup string) bool {
	a := s.adoptedName(backup)
	return a != "" && s.exists(manifestName(server, a))
}
