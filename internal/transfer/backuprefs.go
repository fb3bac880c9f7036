package transfer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"regexp"
	"strings"

	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/ids"
)

// Backups that travel as references (issue 36, docs/backup-repository.md
// "Backups that travel as references"). In a transfer by manifest
// (bymanifest.go), a selected backup that is in the shared repository is
// sent as the part `repository_backup_<uuid>` naming its manifest, not as
// a generated tar.gz: no chunk and no archive byte crosses between the
// nodes. The target checks the reference (its repository, a manifest of
// the server being transferred with that backup id and checksum) while it
// reads the form, and once the transfer succeeds stores its own copy of
// the manifest (chunkstore's adopt.go); the source then deletes its copy
// and schedules a collection, which keeps every chunk the target's copy
// names. Archive backups (local, or not in the repository) travel as
// today in the same form.

// partBackupRef prefixes the part of a backup sent by reference.
const partBackupRef = "repository_backup_"

// maxBackupRef bounds the part of one reference.
const maxBackupRef = 1 << 10

// backupRef is the content of a part partBackupRef+<uuid>.
type backupRef struct {
	Repository string `json:"repository"`
	// Manifest is the name of the source's manifest of the backup under
	// the server: "<uuid>", or "<uuid>@<node>" for a copy the source
	// itself adopted.
	Manifest string `json:"manifest"`
	Checksum string `json:"checksum"` // the manifest's SHA1 (ChunkListSHA1)
}

// refBackup is a repository backup a source sends by reference.
type refBackup struct {
	id  string
	ref backupRef
}

// refTagPattern is the node part of an adopted copy's name
// (chunkstore.NodeObject without its prefix).
var refTagPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,65}$`)

// sha1Pattern is a manifest's checksum.
var sha1Pattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// parseBackupRef decodes the part of backup id (another node's bytes):
// this repository id form, a manifest name that is id's, a SHA-1 checksum;
// nothing else.
func parseBackupRef(id string, b []byte) (backupRef, error) {
	var ref backupRef
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	bad := fmt.Errorf("%w: the part %s%s is not a backup reference", ErrBadForm, partBackupRef, id)
	if len(b) > maxBackupRef || dec.Decode(&ref) != nil || dec.More() || !validRepositoryID(ref.Repository) || !sha1Pattern.MatchString(ref.Checksum) {
		return backupRef{}, bad
	}
	if ref.Manifest != id {
		tag, ok := strings.CutPrefix(ref.Manifest, id+"@")
		if !ok || !refTagPattern.MatchString(tag) {
			return backupRef{}, bad
		}
	}
	return ref, nil
}

// backupRefID is the backup UUID of a reference part's name.
func backupRefID(name string) (string, bool) {
	id, ok := strings.CutPrefix(name, partBackupRef)
	return id, ok && ids.IsUUID(id)
}

// asReferences moves the repository backups of extra (generated archives)
// to references of the shared repository repo; a backup whose manifest
// cannot be named stays a generated archive.
func (svc *Service) asReferences(server, repo string, extra outgoing, log *slog.Logger) outgoing {
	kept := extra.backups[:0:0]
	for _, b := range extra.backups {
		if b.open == nil {
			kept = append(kept, b)
			continue
		}
		name, sum, err := svc.opts.Backups.RepositoryBackupRef(server, b.id)
		if err != nil {
			log.Info("a repository backup cannot go as a reference; sent as an archive generated from it", "backup", b.id, "error", err)
			kept = append(kept, b)
			continue
		}
		log.Info("a backup selected for the transfer is in the shared repository; sent as a reference to its manifest", "backup", b.id, "manifest", name)
		extra.refs = append(extra.refs, refBackup{id: b.id, ref: backupRef{Repository: repo, Manifest: name, Checksum: sum}})
	}
	extra.backups = kept
	return extra
}

// writeRefs sends the references, before the archive backups.
func (o outgoing) writeRefs(mw *multipart.Writer) error {
	for _, r := range o.refs {
		b, _ := json.Marshal(r.ref)
		if err := mw.WriteField(partBackupRef+r.id, string(b)); err != nil {
			return err
		}
	}
	return nil
}

// forgetTravelled deletes the source's copies of the backups the target
// adopted (once it answered success) and schedules a collection.
func (svc *Service) forgetTravelled(server string, extra outgoing) {
	for _, r := range extra.refs {
		if err := svc.opts.Backups.ForgetTravelledBackup(server, r.id); err != nil {
			svc.opts.Log.Warn("deleting this node's copy of a backup the target adopted", "server", server, "backup", r.id, "error", err)
		} else {
			svc.opts.Log.Info("deleted this node's copy of a backup the target adopted", "server", server, "backup", r.id)
		}
	}
}

// backupAdopter is the target's side of references: check while the form
// is read, adopt once the transfer succeeded.
type backupAdopter interface {
	CheckBackupReference(ctx context.Context, repoID, server, backup, name, sum string) error
	AdoptBackupReference(ctx context.Context, repoID, server, backup, name, sum string) (bool, error)
}

// stageRef reads and checks the reference part p; nothing is stored.
func (x *extras) stageRef(ctx context.Context, p *multipart.Part) error {
	id, ok := backupRefID(p.FormName())
	if !ok {
		return fmt.Errorf("%w: %w", ErrBadForm, ErrBadBackupPart)
	}
	if x.adopter == nil {
		return fmt.Errorf("%w: unexpected part %s (this node shares no backup repository)", ErrBadForm, p.FormName())
	}
	if _, dup := x.refs[id]; dup {
		return fmt.Errorf("%w: backup %s sent twice", ErrBadForm, id)
	}
	if _, dup := x.backups[id]; dup {
		return fmt.Errorf("%w: backup %s sent twice", ErrBadForm, id)
	}
	if len(x.backups)+len(x.refs) >= x.maxBackups {
		return fmt.Errorf("%w: %w (%d)", ErrBadForm, ErrTooManyBackups, x.maxBackups)
	}
	raw, err := io.ReadAll(io.LimitReader(ctxReader{ctx, p}, maxBackupRef+1))
	if err != nil {
		return extractErr(ctx, fmt.Errorf("%w: %v", ErrBadForm, err))
	}
	ref, err := parseBackupRef(id, raw)
	if err != nil {
		return err
	}
	if err := x.adopter.CheckBackupReference(ctx, ref.Repository, x.server, id, ref.Manifest, ref.Checksum); err != nil {
		return refErr(ctx, err)
	}
	if x.refs == nil {
		x.refs = map[string]backupRef{}
	}
	x.refs[id] = ref
	return nil
}

// refErr is a refused reference's error: the form's fault (400) when the
// reference names nothing this node can adopt.
func refErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if errors.Is(err, backup.ErrNotShared) || errors.Is(err, backup.ErrBadReference) {
		return fmt.Errorf("%w: %v", ErrBadForm, err)
	}
	return fmt.Errorf("%w: %v", ErrBadArchive, err)
}

// adoptRefs stores this node's copies of the referenced backups (commit);
// a backup already on this node is kept.
func (x *extras) adoptRefs(ctx context.Context, keepHere func(id string) bool) error {
	for id, ref := range x.refs {
		if keepHere(id) {
			x.log.Warn("a backup a transfer brought is already on this node; keeping the one here", "server", x.server, "backup", id)
			continue
		}
		adopted, err := x.adopter.AdoptBackupReference(ctx, ref.Repository, x.server, id, ref.Manifest, ref.Checksum)
		if err != nil {
			return fmt.Errorf("adopting backup %s: %w", id, err)
		}
		if adopted {
			x.log.Info("adopted a backup from the shared repository", "server", x.server, "backup", id, "manifest", ref.Manifest)
		}
	}
	return nil
}
