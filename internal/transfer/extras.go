package transfer

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"os"
	"path/filepath"
	"strings"

	"github.com/wharf/wharf/internal/atomicfile"
	"github.com/wharf/wharf/internal/backup"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/ids"
)

// Part names of the classic form. Pterodactyl Wings' target requires
// `checksum` after `archive` and skips every other part; Pelican Wings'
// target requires `checksum_archive`, takes `backup_<uuid>.tar.gz` with
// `checksum_backup_<uuid>.tar.gz` and `install_logs`, and skips the rest
// (pelican-dev/wings router/router_transfer.go, server/transfer/archive.go).
// A Wharf source sends all of them, so both targets accept its form.
const (
	partArchive         = "archive"
	partChecksum        = "checksum"
	partChecksumArchive = "checksum_archive"
	partBackup          = "backup_"
	partBackupChecksum  = "checksum_backup_"
	partInstallLog      = "install_logs"
	backupExt           = ".tar.gz"
)

// maxInstallLog bounds the install log a target keeps from a transfer: its
// end, as much as GET install-logs answers.
const maxInstallLog = 8 << 20

// ErrBadBackupPart: a backup part whose name is not `<uuid>.tar.gz`.
var ErrBadBackupPart = errors.New("invalid backup part name")

// backupPartID returns the backup UUID in a part's name after prefix. Only
// exactly "<uuid>.tar.gz" (what Pelican Wings sends) is accepted, so that a
// part's name never reaches a path (attacks.md F8).
func backupPartID(name, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, backupExt)
	if !ok || !ids.IsUUID(id) {
		return "", false
	}
	return id, true
}

// backupPartName is the name of a backup's part and, with the checksum
// prefix, of its checksum's.
func backupPartName(prefix, id string) string { return prefix + id + backupExt }

// alreadyHere reports whether a backup with this id is on the node for
// server, or in the flat layout for any server: a backup a transfer brings
// never replaces one (brought by an earlier transfer, or another server's
// under the same UUID).
func alreadyHere(cfg *config.Config, server, id string) bool {
	if _, err := backup.LocalPath(cfg, server, id); err == nil {
		return true
	}
	_, err := os.Lstat(filepath.Join(cfg.System.BackupDirectory, id+backupExt))
	return err == nil
}

// installLogPath is where the node keeps a server's install log (as
// server.writeInstallLog and Pelican Wings).
func installLogPath(logDir, server string) string {
	return filepath.Join(logDir, "install", server+".log")
}

// stagingPrefix names a received backup until the transfer succeeds: the
// backup service's prefix of partial archives, which it removes at boot
// when a crash leaves one.
const stagingPrefix = ".wharf-partial-transfer-"

// stagedBackup is a received backup in a temporary file of the backup
// directory.
type stagedBackup struct {
	tmp string
	sum []byte
}

// extras collects what a form carries besides the archive; nothing is put
// in place before commit.
type extras struct {
	backupDir string
	layout    string // system.backups.layout: where a received backup goes
	// Bounds of the backups accepted (issue 33 item 7): how many, and the
	// bytes of each (0: none).
	maxBackups    int
	maxBackupSize int64
	log           *slog.Logger
	backups       map[string]stagedBackup
	sums          map[string]string // checksum parts by backup UUID, as sent
	install       []byte
	hasLog        bool
	// snapshot extracts a transfer snapshot from the shared repository
	// (bymanifest.go); nil when this node has none.
	snapshot snapshotExtractor
	// Backups sent by reference (backuprefs.go): the server they are
	// adopted for, the references checked, the adopter (nil: refused).
	server  string
	refs    map[string]backupRef
	adopter backupAdopter
}

func newExtras(backupDir string, log *slog.Logger) *extras {
	return &extras{backupDir: backupDir, log: log, backups: map[string]stagedBackup{}, sums: map[string]string{}, maxBackups: 32}
}

// setBounds sets the bounds of the backups accepted from
// system.transfers and the server's disk limit (bytes; 0 none).
func (x *extras) setBounds(maxBackups, maxSizeMiB int, diskLimit int64) {
	x.maxBackups = maxBackups
	switch {
	case maxSizeMiB > 0:
		x.maxBackupSize = int64(maxSizeMiB) << 20
	case diskLimit > 0:
		x.maxBackupSize = diskLimit + diskLimit/64 + 1<<20
	default:
		x.maxBackupSize = 0
	}
}

// ErrTooManyBackups: a form carries more backups (or backup checksums)
// than system.transfers.max_backups.
var ErrTooManyBackups = errors.New("the transfer carries more backups than this node accepts (system.transfers.max_backups)")

// ErrBackupTooLarge: a backup part over its bound.
var ErrBackupTooLarge = errors.New("a backup the transfer carries is larger than this node accepts for the server (system.transfers.max_backup_size, or the server's disk limit)")

// ErrNotABackup: a backup part that is not a gzip-compressed tar archive.
var ErrNotABackup = errors.New("a backup the transfer carries is not a tar.gz archive")

// part reads one part that is not the archive or its checksum; the
// parts of no interest are read and dropped.
func (x *extras) part(ctx context.Context, p *multipart.Part) error {
	name := p.FormName()
	switch {
	case strings.HasPrefix(name, partBackupRef):
		return x.stageRef(ctx, p)
	case strings.HasPrefix(name, partBackup):
		id, ok := backupPartID(name, partBackup)
		if !ok {
			return fmt.Errorf("%w: %w", ErrBadForm, ErrBadBackupPart)
		}
		return x.stageBackup(ctx, id, p)
	case strings.HasPrefix(name, partBackupChecksum):
		id, ok := backupPartID(name, partBackupChecksum)
		if !ok {
			return fmt.Errorf("%w: %w", ErrBadForm, ErrBadBackupPart)
		}
		if _, seen := x.sums[id]; !seen && len(x.sums) >= x.maxBackups {
			return fmt.Errorf("%w: %w (%d)", ErrBadForm, ErrTooManyBackups, x.maxBackups)
		}
		v, err := io.ReadAll(io.LimitReader(ctxReader{ctx, p}, 256))
		if err != nil {
			return extractErr(ctx, fmt.Errorf("%w: %v", ErrBadForm, err))
		}
		x.sums[id] = strings.TrimSpace(string(v))
		return nil
	case name == partInstallLog:
		data, err := readTail(ctxReader{ctx, p}, maxInstallLog)
		if err != nil {
			return extractErr(ctx, fmt.Errorf("%w: %v", ErrBadForm, err))
		}
		x.install, x.hasLog = data, true
		return nil
	}
	if _, err := io.Copy(io.Discard, ctxReader{ctx, p}); err != nil {
		return extractErr(ctx, fmt.Errorf("%w: %v", ErrBadForm, err))
	}
	return nil
}

// stageBackup writes a backup part to a temporary file, hashing it.
func (x *extras) stageBackup(ctx context.Context, id string, r io.Reader) error {
	if _, dup := x.backups[id]; dup {
		return fmt.Errorf("%w: backup %s sent twice", ErrBadForm, id)
	}
	if _, dup := x.refs[id]; dup {
		return fmt.Errorf("%w: backup %s sent twice", ErrBadForm, id)
	}
	if len(x.backups)+len(x.refs) >= x.maxBackups {
		return fmt.Errorf("%w: %w (%d)", ErrBadForm, ErrTooManyBackups, x.maxBackups)
	}
	if err := os.MkdirAll(x.backupDir, 0o700); err != nil {
		return fmt.Errorf("creating the backup directory: %w", err)
	}
	f, err := os.CreateTemp(x.backupDir, stagingPrefix+"*")
	if err != nil {
		return fmt.Errorf("storing a backup: %w", err)
	}
	h := sha256.New()
	src := io.Reader(ctxReader{ctx, r})
	if x.maxBackupSize > 0 {
		src = io.LimitReader(src, x.maxBackupSize+1)
	}
	n, err := io.Copy(io.MultiWriter(f, h), src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		err = extractErr(ctx, fmt.Errorf("%w: backup %s: %v", ErrBadForm, id, err))
	case x.maxBackupSize > 0 && n > x.maxBackupSize:
		err = fmt.Errorf("%w: %w: backup %s is over %d bytes", ErrBadForm, ErrBackupTooLarge, id, x.maxBackupSize)
	default:
		err = checkBackupHeader(f.Name())
		if err != nil {
			err = fmt.Errorf("%w: %w: backup %s: %v", ErrBadForm, ErrNotABackup, id, err)
		}
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	x.backups[id] = stagedBackup{tmp: f.Name(), sum: h.Sum(nil)}
	return nil
}

// checkBackupHeader checks, cheaply, that the file at p is a tar.gz
// archive: a gzip stream whose first tar header (or end of archive) reads
// with a valid checksum. Nothing else of it is read.
func checkBackupHeader(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return isTarGz(f)
}

// isTarGz reads the start of r as a gzip-compressed tar archive (at most
// its first header block).
func isTarGz(r io.Reader) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	defer zr.Close()
	_, err = tar.NewReader(io.LimitReader(zr, 64<<10)).Next()
	if errors.Is(err, io.EOF) {
		return nil // an empty archive: the end blocks only
	}
	return err
}

// verify checks that every backup came with its checksum and matches it.
func (x *extras) verify() error {
	for id, b := range x.backups {
		sent, ok := x.sums[id]
		if !ok {
			return fmt.Errorf("%w: checksum missing for backup %s", ErrBadForm, id)
		}
		want, err := hex.DecodeString(sent)
		if err != nil || !hmac.Equal(want, b.sum) {
			return fmt.Errorf("%w (backup %s)", ErrChecksumMismatch, id)
		}
	}
	return nil
}

// commit puts the backups and the install log in place for server. A
// backup that cannot be put in place fails the transfer; the install log
// is kept when possible (as Pelican Wings, it never fails a transfer).
func (x *extras) commit(ctx context.Context, server, logDir string) error {
	cfg := &config.Config{}
	cfg.System.BackupDirectory, cfg.System.Backups.Layout = x.backupDir, x.layout
	if err := x.adoptRefs(ctx, func(id string) bool { return alreadyHere(cfg, server, id) }); err != nil {
		return err
	}
	for id, b := range x.backups {
		if alreadyHere(cfg, server, id) {
			x.log.Warn("a backup a transfer brought is already on this node; keeping the one here", "server", server, "backup", id)
		} else if _, err := backup.CommitLocal(cfg, server, id, b.tmp); err != nil {
			return fmt.Errorf("storing backup %s: %w", id, err)
		} else {
			x.log.Info("received a backup", "server", server, "backup", id)
		}
		_ = os.Remove(b.tmp)
		delete(x.backups, id)
	}
	if x.hasLog {
		keepInstallLog(x.log, logDir, server, x.install)
	}
	return nil
}

// keepInstallLog puts the install log a transfer brought in place for
// server; as Pelican Wings, a log that cannot be written is logged and
// does not fail the transfer.
func keepInstallLog(log *slog.Logger, logDir, server string, data []byte) {
	p := installLogPath(logDir, server)
	err := os.MkdirAll(filepath.Dir(p), 0o700)
	if err == nil {
		err = atomicfile.WriteFile(p, data, 0o600)
	}
	if err != nil {
		log.Warn("could not keep the install log a transfer brought", "server", server, "error", err)
	}
}

// discard removes the backups not committed.
func (x *extras) discard() {
	for id, b := range x.backups {
		_ = os.Remove(b.tmp)
		delete(x.backups, id)
	}
}

// readTail reads r to its end and returns at most its last limit bytes.
func readTail(r io.Reader, limit int) ([]byte, error) {
	buf := make([]byte, 0, 64<<10)
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if len(buf) > 2*limit {
			buf = append(buf[:0], buf[len(buf)-limit:]...)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if len(buf) > limit {
		buf = buf[len(buf)-limit:]
	}
	return buf, nil
}

// localBackup is a local backup a source sends: the archive file at path,
// or, when open is set, the stream it opens (a repository backup's tar.gz,
// generated while it is sent).
type localBackup struct {
	id, path string
	open     func(ctx context.Context) (io.ReadCloser, error)
}

// reader opens the backup's bytes; the caller closes them.
func (b localBackup) reader(ctx context.Context) (io.ReadCloser, error) {
	if b.open != nil {
		return b.open(ctx)
	}
	return os.Open(b.path)
}

// outgoing is what a source sends after the archive and its checksums.
type outgoing struct {
	backups    []localBackup
	refs       []refBackup // sent by reference (backuprefs.go)
	installLog string      // its path; a missing log is not sent
	// onBackup, when set, is called before each backup is sent.
	onBackup func(n int, id string)
}

// write sends each backup followed by its checksum, then the install log,
// as Pelican Wings' source does.
func (o outgoing) write(ctx context.Context, mw *multipart.Writer) error {
	for i, b := range o.backups {
		if o.onBackup != nil {
			o.onBackup(i+1, b.id)
		}
		if err := writeBackup(ctx, mw, b); err != nil {
			return err
		}
	}
	f, err := os.Open(o.installLog)
	if err != nil {
		// No install log (a server installed elsewhere, or never).
		return nil
	}
	defer f.Close()
	part, err := mw.CreateFormFile(partInstallLog, "install.log")
	if err != nil {
		return err
	}
	_, err = io.Copy(part, ctxReader{ctx, f})
	return err
}

// writeBackup sends one backup and its checksum, computed over the bytes
// sent. A backup that cannot be read to its end (an unreadable archive, a
// damaged repository backup) fails the transfer: the form is cut and the
// target keeps nothing of it.
func writeBackup(ctx context.Context, mw *multipart.Writer, b localBackup) error {
	// The stream's own context ends with this send, so that a generating
	// goroutine never outlives it (whichever way it ends).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f, err := b.reader(ctx)
	if err != nil {
		return fmt.Errorf("backup %s: %w", b.id, err)
	}
	defer f.Close()
	part, err := mw.CreateFormFile(backupPartName(partBackup, b.id), b.id+backupExt)
	if err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(part, h), ctxReader{ctx, f}); err != nil {
		return fmt.Errorf("backup %s: %w", b.id, err)
	}
	return mw.WriteField(backupPartName(partBackupChecksum, b.id), hex.EncodeToString(h.Sum(nil)))
}
