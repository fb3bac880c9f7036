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
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
)

// Transfers by manifest (issue 36, docs/backup-repository.md "Shared
// repository across nodes"). When the source and the target share the
// backup repository (the target names its repository id in the answer to
// the transfer's first question, GET /api/transfers), a stopped transfer
// sends no file data: the source stores the server as a snapshot of the
// repository (only the chunks the bucket lacks are uploaded), then posts
// the form with the part `repository_snapshot` (the repository id and the
// snapshot's name) instead of `archive`, and its checksum (the snapshot's,
// ChunkListSHA1) in `checksum`; backups and the install log follow as
// today. The target extracts the snapshot from the bucket, every chunk
// checked against its hash, and the source deletes the snapshot once the
// target answered. Any other target (Wings, an older Wharf, another
// repository) gets today's transfer.

// partRepository is the form part naming the snapshot.
const partRepository = "repository_snapshot"

// maxSnapshotRef bounds the part naming the snapshot.
const maxSnapshotRef = 4 << 10

// snapshotRef is the content of the part partRepository.
type snapshotRef struct {
	Repository string `json:"repository"`
	Snapshot   string `json:"snapshot"`
}

// Offer is this node's answer to a source's first question: the live
// transfer versions it speaks (none when live transfers are off) and the
// id of its backup repository when it is shared.
func (svc *Service) Offer(ctx context.Context) Offer {
	o := Offer{Protocol: LiveProtocol}
	if svc.LiveEnabled() {
		o = LiveOffer()
	}
	if svc.opts.Backups != nil {
		o.Repository, _ = svc.opts.Backups.SharedRepositoryID(ctx)
	}
	return o
}

// Answers reports whether this node answers the first question (a node
// with live transfers off and no shared repository answers 404, as one
// that never heard of them).
func (svc *Service) Answers(ctx context.Context) bool {
	if svc.LiveEnabled() {
		return true
	}
	if svc.opts.Backups == nil {
		return false
	}
	_, ok := svc.opts.Backups.SharedRepositoryID(ctx)
	return ok
}

// targetRepository asks the target for its shared repository's id; ""
// when it has none or does not answer clearly.
func (svc *Service) targetRepository(ctx context.Context, url, token string) string {
	ctx, cancel := context.WithTimeout(ctx, negotiateTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ""
	}
	req.Header.Set("Authorization", token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set(LiveVersionHeader, fmt.Sprint(LiveVersion))
	res, err := svc.opts.Client.Do(req)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	var o Offer
	if res.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&o) != nil {
		return ""
	}
	return o.Repository
}

// byManifest runs the transfer by manifest when this node and the target
// share the repository, and returns its outcome; handled false means
// neither side changed anything (the caller runs today's transfer).
func (svc *Service) byManifest(t *Transfer, s *server.Server, url, token string, extra outgoing, tl transferLog, log *slog.Logger, end func()) (handled bool, _ error) {
	if svc.opts.Backups == nil {
		return false, nil
	}
	mine, shared := svc.opts.Backups.SharedRepositoryID(t.ctx)
	if !shared || svc.targetRepository(t.ctx, url, token) != mine {
		return false, nil
	}
	log.Info("the target shares the backup repository: transfer by manifest", "repository", mine)
	err := s.StopForJob(t.ctx, svc.opts.StopWait)
	if err == nil {
		if rerr := svc.opts.Servers.RemoveContainer(t.ctx, t.server); rerr != nil {
			log.Warn("could not remove the stopped container before sending", "error", rerr)
		}
		if !t.setStatus(Processing) {
			err = context.Cause(t.ctx)
		}
	}
	if err == nil {
		extra = svc.asReferences(t.server, mine, extra, log)
		err = svc.sendSnapshot(t, s, url, token, mine, extra, tl)
	}
	if t.ctx.Err() != nil && err != nil {
		err = context.Cause(t.ctx)
	}
	svc.endOutgoing(t, err, end, tl, log, "mode", "manifest")
	return true, err
}

// sendSnapshot stores the server as a snapshot, posts the form naming it,
// and deletes the snapshot whatever the answer.
func (svc *Service) sendSnapshot(t *Transfer, s *server.Server, url, token, repo string, extra outgoing, tl transferLog) error {
	name := "transfer-" + uuid.NewString()
	tl.msg("Storing the server in the shared backup repository...")
	sum, err := svc.opts.Backups.WriteTransferSnapshot(t.ctx, t.server, s.Files().Trusted(), name)
	defer func() {
		if derr := svc.opts.Backups.DeleteTransferSnapshot(t.server, name); derr != nil {
			svc.opts.Log.Warn("deleting the transfer snapshot", "server", t.server, "snapshot", name, "error", derr)
		}
	}()
	if err != nil {
		return err
	}
	// A source whose lease lapsed may have had its snapshot collected by
	// another node: it fails rather than name it (docs/backup-repository.md
	// "Transfer snapshots of a transfer that is over").
	if err := svc.opts.Backups.TransferSnapshotValid(t.server, name); err != nil {
		return err
	}
	tl.msg("Sending the snapshot's name to destination...")
	ref, _ := json.Marshal(snapshotRef{Repository: repo, Snapshot: name})
	err = pushForm(t.ctx, svc.opts.Client, url, token, func(mw *multipart.Writer) error {
		if err := mw.WriteField(partRepository, string(ref)); err != nil {
			return err
		}
		for _, n := range []string{partChecksum, partChecksumArchive} {
			if err := mw.WriteField(n, sum); err != nil {
				return err
			}
		}
		if err := extra.writeRefs(mw); err != nil {
			return err
		}
		if err := extra.write(t.ctx, mw); err != nil {
			return err
		}
		return mw.Close()
	})
	if err == nil {
		// Before the snapshot's deletion above: its collection then runs
		// with these copies gone too.
		svc.forgetTravelled(t.server, extra)
	}
	return err
}

// snapshotExtractor is the target's side: it extracts the snapshot a
// form's part names into dst and returns its checksum (hex), which the
// form's `checksum` must then match.
type snapshotExtractor func(ctx context.Context, raw io.Reader, dst *sandbox.FS, opts archive.ExtractOptions) (string, error)

// extractorFor is the snapshotExtractor of the incoming server id.
func (svc *Service) extractorFor(id string) snapshotExtractor {
	if svc.opts.Backups == nil {
		return nil
	}
	return func(ctx context.Context, raw io.Reader, dst *sandbox.FS, opts archive.ExtractOptions) (string, error) {
		b, err := io.ReadAll(io.LimitReader(raw, maxSnapshotRef+1))
		if err != nil {
			return "", extractErr(ctx, fmt.Errorf("%w: %v", ErrBadForm, err))
		}
		ref, err := parseSnapshotRef(b)
		if err != nil {
			return "", err
		}
		start := time.Now()
		sum, err := svc.opts.Backups.ExtractTransferSnapshot(ctx, ref.Repository, id, ref.Snapshot, dst, opts)
		if errors.Is(err, backup.ErrNotShared) {
			return "", fmt.Errorf("%w: %v", ErrBadForm, err)
		}
		if err != nil {
			return "", extractErr(ctx, fmt.Errorf("%w: %v", ErrBadArchive, err))
		}
		svc.opts.Log.Info("transfer snapshot extracted from the shared repository", "server", id, "snapshot", ref.Snapshot, "duration", time.Since(start))
		return sum, nil
	}
}

// parseSnapshotRef decodes the part naming the snapshot (another node's
// bytes): a repository id and a name "transfer-<uuid>", nothing else.
func parseSnapshotRef(b []byte) (snapshotRef, error) {
	var ref snapshotRef
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if len(b) > maxSnapshotRef || dec.Decode(&ref) != nil || dec.More() || !validRepositoryID(ref.Repository) || !validSnapshotName(ref.Snapshot) {
		return snapshotRef{}, fmt.Errorf("%w: the part %s is not a snapshot reference", ErrBadForm, partRepository)
	}
	return ref, nil
}

// validRepositoryID is a repository id: 32 lowercase hex digits.
func validRepositoryID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validSnapshotName is a name the source makes: "transfer-<uuid>".
func validSnapshotName(n string) bool {
	rest, ok := cutPrefix(n, "transfer-")
	if !ok {
		return false
	}
	_, err := uuid.Parse(rest)
	return err == nil && len(rest) == 36
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) < len(p) || s[:len(p)] != p {
		return s, false
	}
	return s[len(p):], true
}
