package sftpd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/backupview"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/server"
)

// Permissions the panel grants a user (files-sftp.md §4.6).
const (
	permRead        = "file.read"         // list, stat
	permReadContent = "file.read-content" // download
	permCreate      = "file.create"       // new file, mkdir, symlink
	permUpdate      = "file.update"       // write an existing file, setstat, rename
	permDelete      = "file.delete"       // remove, rmdir
	permAll         = "*"
)

// session is one authenticated SSH connection to one server.
type session struct {
	conn     ssh.Conn
	srv      *server.Server
	user, ip string
	perms    map[string]bool
	readOnly bool
	activity Recorder
	now      func() time.Time
	log      *slog.Logger
	once     sync.Once
	// handles counts the open files and directory listings of all of the
	// connection's SFTP channels, against maxHandles (takeHandle).
	handles    atomic.Int64
	maxHandles int64
}

// User is the panel's user UUID (server.Session).
func (s *session) User() string { return s.user }

// Close ends the connection (server.Session): suspension, deletion and
// deauthorization call it.
func (s *session) Close(_ int, reason string) {
	s.once.Do(func() {
		s.log.Info("closing the SFTP session", "reason", reason)
		_ = s.conn.Close()
	})
}

// can reports whether the user holds p. Nothing is allowed while the
// server is suspended (its sessions are being closed); a job (a restore)
// forbids only writes (allowWrite).
func (s *session) can(p string) bool {
	if s.srv.IsSuspended() {
		return false
	}
	return s.perms[permAll] || s.perms[p]
}

func (s *session) allowRead(p string) error {
	if !s.can(p) {
		return errDenied
	}
	return nil
}

// allowWrite is the gate of every change: read_only, the permission, and
// the server's job slot, held until the job's End (an SFTP job: refused
// while suspended or while an exclusive job runs, naming it). The job's
// FS is the writable door to the files; its context ends with parent and
// when the server is deleted.
func (s *session) allowWrite(parent context.Context, p string) (*server.Job, error) {
	if s.readOnly {
		return nil, errReadOnly
	}
	if !s.can(p) {
		return nil, errDenied
	}
	job, err := s.srv.BeginJob(parent, server.JobSFTP)
	if err != nil {
		return nil, toStatus(err)
	}
	return job, nil
}

// record queues a server:sftp.<event> activity.
func (s *session) record(event string, files ...any) {
	if s.activity == nil {
		return
	}
	user := s.user
	s.activity.Record(panel.Activity{
		User: &user, Server: s.srv.UUID(), Event: "server:sftp." + event,
		Metadata: map[string]any{"files": files}, IP: s.ip, Timestamp: s.now().UTC(),
	})
}

// handlers serve the SFTP requests of a session, every one through the
// server's sandbox.
type handlers struct {
	sess   *session
	browse *backupview.View // the backups folder; nil: none
	pacer  *gcPacer         // told of every upload write; nil: none
}

// files is the read-only view of the server's files: a change writes
// through the FS of the job allowWrite gives.
func (h *handlers) files() sandbox.ReadOnly { return h.sess.srv.Files() }

// recover turns a panic in a handler (pkg/sftp runs them on its own
// goroutines, where the connection's recover cannot see them) into a
// failure of that request.
func (h *handlers) recover(err *error) {
	if r := recover(); r != nil {
		h.sess.log.Error("SFTP request panicked", "panic", r, "stack", string(debug.Stack()))
		*err = errFailure
	}
}

// Fileread opens a file for download.
func (h *handlers) Fileread(r *sftp.Request) (_ io.ReaderAt, err error) {
	defer h.recover(&err)
	if err := h.sess.allowRead(permReadContent); err != nil {
		return nil, err
	}
	if p, in, err := h.inView(r.Filepath); err != nil || in {
		if err != nil {
			return nil, err
		}
		return h.viewRead(r, p)
	}
	release, err := h.sess.takeHandle()
	if err != nil {
		return nil, err
	}
	// The sandbox opens with O_NONBLOCK (a FIFO never waits for a writer);
	// what it opened is then checked: regular files only.
	f, err := h.files().Open(r.Filepath)
	if err != nil {
		release()
		return nil, toStatus(err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = errNotRegular
	}
	if err != nil {
		_ = f.Close()
		release()
		return nil, toStatus(err)
	}
	return &reader{f: f, release: release}, nil
}

// Filewrite opens a file for upload.
func (h *handlers) Filewrite(r *sftp.Request) (_ io.WriterAt, err error) {
	defer h.recover(&err)
	return h.openWrite(r, false)
}

// OpenFile opens a file for reading and writing.
func (h *handlers) OpenFile(r *sftp.Request) (_ sftp.WriterAtReaderAt, err error) {
	defer h.recover(&err)
	return h.openWrite(r, true)
}

func (h *handlers) openWrite(r *sftp.Request, read bool) (*writer, error) {
	if _, in, err := h.inView(r.Filepath); err != nil || in {
		return nil, cmp.Or(err, errViewReadOnly)
	}
	_, lerr := h.files().Lstat(r.Filepath)
	exists := lerr == nil
	perm, event := permCreate, "create"
	if exists {
		perm, event = permUpdate, "write"
	}
	// The slot is held while the file is opened (it may be created or
	// truncated), then by each write (writer.WriteAt).
	job, err := h.sess.allowWrite(r.Context(), perm)
	if err != nil {
		return nil, err
	}
	defer job.End()
	release, err := h.sess.takeHandle()
	if err != nil {
		return nil, err
	}
	flags := r.Pflags()
	oflag := os.O_WRONLY
	if read {
		oflag = os.O_RDWR
	}
	if flags.Creat {
		oflag |= os.O_CREATE
	}
	if flags.Trunc {
		oflag |= os.O_TRUNC
	}
	if flags.Excl {
		oflag |= os.O_EXCL
	}
	// Never O_APPEND: writes come with their offset (WriteAt).
	f, err := job.FS().OpenFile(r.Filepath, oflag, 0o644)
	if err != nil {
		release()
		return nil, openStatus(err)
	}
	h.sess.record(event, r.Filepath)
	// Clients open uploads read-write (pkg/sftp's Create does): the handle
	// is given, but reading it needs file.read-content.
	return &writer{f: f, srv: h.sess.srv, canRead: read && h.sess.can(permReadContent), release: release, pacer: h.pacer}, nil
}

// openStatus is toStatus for opens, which may meet a FIFO, socket or
// device: those are refused as not regular files.
func openStatus(err error) error {
	if errors.Is(err, sandbox.ErrNotRegular) {
		return errNotRegular
	}
	return toStatus(err)
}

// reader is a download handle. ReadAt is safe for concurrent use, so
// pkg/sftp's workers read in parallel.
type reader struct {
	f       *sandbox.File
	release func() // the session's handle
}

func (r *reader) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.f.ReadAt(p, off)
	return n, toStatus(err)
}

func (r *reader) Close() error {
	defer r.release()
	return toStatus(r.f.Close())
}

// writer is an upload handle. Every write goes through the sandbox File,
// which counts it against the disk limit before writing (Quota Exceeded
// past it); writes are serialised because that accounting is per handle.
// Each write holds the server's job slot while it runs (a client may keep
// a handle open for days): an upload does not continue into a restore, and
// a restore never runs under a write.
type writer struct {
	mu      sync.Mutex
	f       *sandbox.File
	srv     *server.Server
	canRead bool
	release func()   // the session's handle
	pacer   *gcPacer // the collector's pace while uploads write
}

func (w *writer) WriteAt(p []byte, off int64) (int, error) {
	job, err := w.srv.BeginJob(context.Background(), server.JobSFTP)
	if err != nil {
		return 0, toStatus(err)
	}
	defer job.End()
	w.mu.Lock()
	defer w.mu.Unlock()
	// The handle's file was opened through a job's filesystem; this write
	// runs under this job: not once its context has ended (the server
	// deleted while the write waited for the handle's lock).
	if job.Context().Err() != nil {
		return 0, toStatus(context.Cause(job.Context()))
	}
	n, err := w.f.WriteAt(p, off)
	w.pacer.wrote()
	return n, toStatus(err)
}

func (w *writer) ReadAt(p []byte, off int64) (int, error) {
	if !w.canRead {
		return 0, errDenied
	}
	n, err := w.f.ReadAt(p, off)
	return n, toStatus(err)
}

func (w *writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.release()
	return toStatus(w.f.Close())
}

// Filecmd runs the commands that change the tree.
func (h *handlers) Filecmd(r *sftp.Request) (err error) {
	defer h.recover(&err)
	if viewed, err := h.viewChange(r); viewed {
		return err
	}
	switch r.Method {
	case "Setstat":
		return h.setstat(r)
	case "Rename", "PosixRename":
		return h.rename(r)
	case "Rmdir":
		return h.rmdir(r)
	case "Mkdir":
		return h.mkdir(r)
	case "Symlink":
		return h.symlink(r)
	case "Remove":
		return h.remove(r)
	}
	// Link (hard links would share a file across names and the disk
	// accounting), StatVFS and anything newer.
	return sftp.ErrSSHFxOpUnsupported
}

// setstat changes the size, permission bits and times of a file or
// directory, never of a symbolic link's target (GHSA-rhq6-9rgh-v45c), and
// never the owner (every file belongs to the system user).
func (h *handlers) setstat(r *sftp.Request) error {
	job, err := h.sess.allowWrite(r.Context(), permUpdate)
	if err != nil {
		return err
	}
	defer job.End()
	ctx := job.Context()
	fsys := job.FS()
	fi, err := fsys.Lstat(r.Filepath)
	if err != nil {
		return toStatus(err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return errLinkRefused
	}
	flags, attrs := r.AttrFlags(), r.Attributes()
	if flags.Size {
		if fi.IsDir() {
			return errIsDir
		}
		// A FIFO would not even be opened (the sandbox refuses it without
		// waiting); refusing it here says so without trying.
		if !fi.Mode().IsRegular() {
			return errNotRegular
		}
		f, err := fsys.OpenFile(r.Filepath, os.O_WRONLY, 0)
		if err != nil {
			return openStatus(err)
		}
		err = f.Truncate(int64(attrs.Size))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return toStatus(err)
		}
	}
	if flags.Permissions {
		if err := fsys.ChmodContext(ctx, r.Filepath, permissionBits(attrs.Mode, fi.IsDir())); err != nil {
			return toStatus(err)
		}
	}
	if flags.Acmodtime {
		at, mt := time.Unix(int64(attrs.Atime), 0), time.Unix(int64(attrs.Mtime), 0)
		if err := fsys.Lchtimes(r.Filepath, at, mt); err != nil {
			return toStatus(err)
		}
	}
	return nil
}

// permissionBits keeps only the 0777 bits of a requested mode (never
// setuid, setgid or sticky). A file asked for no bits at all gets 0644, a
// directory its owner could not enter gets 0755.
func permissionBits(mode uint32, dir bool) fs.FileMode {
	m := fs.FileMode(mode) & fs.ModePerm
	switch {
	case dir && m&0o700 != 0o700:
		return 0o755
	case !dir && m == 0:
		return 0o644
	}
	return m
}

func (h *handlers) rename(r *sftp.Request) error {
	job, err := h.sess.allowWrite(r.Context(), permUpdate)
	if err != nil {
		return err
	}
	defer job.End()
	ctx := job.Context()
	if err := job.FS().RenameContext(ctx, r.Filepath, r.Target); err != nil {
		return toStatus(err)
	}
	h.sess.record("rename", map[string]string{"from": r.Filepath, "to": r.Target})
	return nil
}

// rmdir removes a directory and everything in it (as Wings does). A
// directory that holds a denylisted file is refused whole (by RemoveAll).
func (h *handlers) rmdir(r *sftp.Request) error {
	job, err := h.sess.allowWrite(r.Context(), permDelete)
	if err != nil {
		return err
	}
	defer job.End()
	ctx := job.Context()
	if path.Clean("/"+r.Filepath) == "/" {
		return errDenied
	}
	fsys := job.FS()
	fi, err := fsys.Lstat(r.Filepath)
	if err != nil {
		return toStatus(err)
	}
	if !fi.IsDir() {
		return errNotDir
	}
	if err := fsys.RemoveAll(ctx, r.Filepath); err != nil {
		return toStatus(err)
	}
	h.sess.record("delete", r.Filepath)
	return nil
}

// mkdir creates a directory and its missing parents.
func (h *handlers) mkdir(r *sftp.Request) error {
	job, err := h.sess.allowWrite(r.Context(), permCreate)
	if err != nil {
		return err
	}
	defer job.End()
	fsys := job.FS()
	if _, err := fsys.Lstat(r.Filepath); err == nil {
		return errExists
	}
	if err := fsys.MkdirAll(r.Filepath, 0o755); err != nil {
		return toStatus(err)
	}
	h.sess.record("create-directory", r.Filepath)
	return nil
}

// symlink creates a link whose target lies inside the root, stored
// relative to the link's directory (so that it means the same inside the
// container). pkg/sftp gives the target in Filepath and the link in Target.
func (h *handlers) symlink(r *sftp.Request) error {
	job, err := h.sess.allowWrite(r.Context(), permCreate)
	if err != nil {
		return err
	}
	defer job.End()
	link := path.Clean("/" + r.Target)
	if link == "/" {
		return errExists
	}
	dir := path.Dir(link)
	target := r.Filepath
	if !path.IsAbs(target) {
		target = dir + "/" + target
	}
	abs, ok := insideRoot(target)
	if !ok || strings.IndexByte(r.Filepath, 0) >= 0 || r.Filepath == "" {
		return errBadLink
	}
	rel, err := relativeTo(dir, abs)
	if err != nil {
		return errBadLink
	}
	if err := job.FS().Symlink(rel, link); err != nil {
		return toStatus(err)
	}
	h.sess.record("create", link)
	return nil
}

// insideRoot cleans an absolute name lexically; false when ".." would
// climb above the root.
func insideRoot(name string) (string, bool) {
	rel, err := sandbox.CleanName(name)
	switch {
	case err != nil:
		return "", false
	case rel == ".":
		return "/", true
	}
	return "/" + rel, true
}

// relativeTo writes the absolute in-root name target relative to the
// absolute directory dir.
func relativeTo(dir, target string) (string, error) {
	split := func(p string) []string {
		if p == "/" {
			return nil
		}
		return strings.Split(strings.TrimPrefix(p, "/"), "/")
	}
	d, t := split(dir), split(target)
	i := 0
	for i < len(d) && i < len(t) && d[i] == t[i] {
		i++
	}
	parts := make([]string, 0, len(d)-i+len(t)-i)
	for range d[i:] {
		parts = append(parts, "..")
	}
	parts = append(parts, t[i:]...)
	if len(parts) == 0 {
		return ".", nil
	}
	if len(parts) > 4096 {
		return "", fmt.Errorf("link target too deep")
	}
	return strings.Join(parts, "/"), nil
}

// remove deletes a file or a symbolic link (never a directory, never what
// a link points to).
func (h *handlers) remove(r *sftp.Request) error {
	job, err := h.sess.allowWrite(r.Context(), permDelete)
	if err != nil {
		return err
	}
	defer job.End()
	fsys := job.FS()
	fi, err := fsys.Lstat(r.Filepath)
	if err != nil {
		return toStatus(err)
	}
	if fi.IsDir() {
		return errIsDir
	}
	if err := fsys.Remove(r.Filepath); err != nil {
		return toStatus(err)
	}
	h.sess.record("delete", r.Filepath)
	return nil
}

// Filelist serves List and Stat.
func (h *handlers) Filelist(r *sftp.Request) (_ sftp.ListerAt, err error) {
	defer h.recover(&err)
	if err := h.sess.allowRead(permRead); err != nil {
		return nil, err
	}
	if p, in, err := h.inView(r.Filepath); err != nil || in {
		if err != nil {
			return nil, err
		}
		return h.viewList(r, p)
	}
	switch r.Method {
	case "List":
		release, err := h.sess.takeHandle()
		if err != nil {
			return nil, err
		}
		d, err := h.files().Open(r.Filepath)
		if err != nil {
			release()
			return nil, toStatus(err)
		}
		fi, err := d.Stat()
		if err != nil || !fi.IsDir() {
			_ = d.Close()
			release()
			return nil, errNotDir
		}
		return &dirLister{f: d, release: release, extra: h.viewRootEntry(r.Filepath)}, nil
	case "Stat":
		fi, err := h.files().Stat(r.Filepath)
		if err != nil {
			return nil, toStatus(err)
		}
		return listOf{fi}, nil
	}
	return nil, sftp.ErrSSHFxOpUnsupported
}

// Lstat describes a name without following a final link.
func (h *handlers) Lstat(r *sftp.Request) (_ sftp.ListerAt, err error) {
	defer h.recover(&err)
	if err := h.sess.allowRead(permRead); err != nil {
		return nil, err
	}
	if p, in, err := h.inView(r.Filepath); err != nil || in {
		if err != nil {
			return nil, err
		}
		return h.viewList(r, p)
	}
	fi, err := h.files().Lstat(r.Filepath)
	if err != nil {
		return nil, toStatus(err)
	}
	return listOf{fi}, nil
}

// Readlink returns a link's stored target (data: nothing is resolved).
func (h *handlers) Readlink(name string) (_ string, err error) {
	defer h.recover(&err)
	if err := h.sess.allowRead(permRead); err != nil {
		return "", err
	}
	if p, in, err := h.inView(name); err != nil || in {
		if err != nil {
			return "", err
		}
		return h.viewReadlink(p)
	}
	t, err := h.files().Readlink(name)
	return t, toStatus(err)
}

type listOf []fs.FileInfo

func (l listOf) ListAt(buf []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(buf, l[off:])
	if n+int(off) == len(l) {
		return n, io.EOF
	}
	return n, nil
}

// dirLister streams a directory one page at a time (pkg/sftp asks for
// pages of sftp.MaxFilelist entries), so a directory of a million entries
// never sits in memory. Entries come from the open directory's descriptor
// (their lstat data is taken relative to it).
type dirLister struct {
	mu      sync.Mutex
	f       *sandbox.File
	pos     int64
	eof     bool
	release func()        // the session's handle
	extra   []os.FileInfo // listed first (the backups folder at the root)
}

func (l *dirLister) ListAt(buf []os.FileInfo, off int64) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if off != l.pos {
		return 0, &statusError{sftp.ErrSSHFxFailure, "A directory is listed in order."}
	}
	n := 0
	for n < len(buf) && len(l.extra) > 0 {
		buf[n], l.extra = l.extra[0], l.extra[1:]
		n++
	}
	for n < len(buf) && !l.eof {
		ents, err := l.f.ReadDir(len(buf) - n)
		for _, e := range ents {
			fi, ierr := e.Info()
			if ierr != nil {
				continue // gone since it was listed
			}
			buf[n] = fi
			n++
		}
		if err == io.EOF || (err == nil && len(ents) == 0) {
			l.eof = true
		} else if err != nil {
			l.pos += int64(n)
			return n, toStatus(err)
		}
	}
	l.pos += int64(n)
	if l.eof {
		return n, io.EOF
	}
	return n, nil
}

func (l *dirLister) Close() error {
	defer l.release()
	return toStatus(l.f.Close())
}

var (
	_ sftp.OpenFileWriter     = (*handlers)(nil)
	_ sftp.LstatFileLister    = (*handlers)(nil)
	_ sftp.ReadlinkFileLister = (*handlers)(nil)
)
