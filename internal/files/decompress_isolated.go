package files

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/isolate"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/usererr"
)

// Isolation runs Decompress in a child process of the daemon's binary
// (`wharf extract-worker`), so that no archive can kill the daemon: the
// decoders of every format we accept read user bytes, and one of them asking
// the Go runtime for more memory than exists ends its process with a fatal
// error nothing can recover. The child has the limits of Limits, no network
// and the server files' owner as its user (package isolate), and writes
// into the server's directory through its own sandbox on the same root,
// with the same denylist and what is left of the disk limit.
//
// Cleaning up after a child that was killed (or died) mid-extraction: the
// child announces every entry in a journal before it creates it, and the
// daemon removes the announced entries, newest first. This was chosen over
// extracting into a staging directory that the daemon then moves into
// place: the extraction's rules (merging into existing directories,
// replacing files and links in the way, refusing a directory in the way or
// a link planted in the tree) stay where they are, in the child's one pass
// through the sandbox, instead of being done again by a second pass in the
// daemon, which could itself fail halfway with part of the archive moved in
// and the files it replaced gone.
type Isolation struct {
	// Command runs the worker: the daemon's binary and its hidden
	// subcommand ("/proc/self/exe extract-worker" when nil).
	Command []string
	Limits  isolate.Limits
	// UID and GID own the server's files (system.user): the child runs as
	// them when the daemon is root.
	UID, GID int
	// Denylist is the server's egg file_denylist.
	Denylist []string
}

// WorkerCommand is the hidden subcommand that runs the child's side.
const WorkerCommand = "extract-worker"

// extractJob is what the daemon sends the child on its standard input.
type extractJob struct {
	Dir, File string // as the panel sent them
	UID, GID  int
	Denylist  []string
	DiskLimit int64 // the first lease of the server's limit: 0 unlimited, -1 no writes
	Leased    bool  // more can be asked for on descriptor 5
}

// extractReply is what the child writes on its standard output.
type extractReply struct {
	Result DecompressResult
	Error  *replyError
}

// replyError carries an extraction's error across the process boundary:
// the user's message and kind when it has one, the rest for the log.
type replyError struct {
	Kind    usererr.Kind
	Message string
	Cause   string
}

func replyErrorOf(err error) *replyError {
	r := &replyError{Cause: err.Error()}
	if ue, ok := usererr.From(err); ok {
		r.Kind, r.Message = ue.Kind, ue.Message
	}
	return r
}

func (r *replyError) err() error {
	cause := errors.New("extractor: " + r.Cause)
	if r.Kind == 0 {
		return cause
	}
	return usererr.Wrap(cause, r.Kind, r.Message)
}

// decompressIsolated is Decompress in a child process.
func (m *Manager) decompressIsolated(ctx context.Context, root, file string) (DecompressResult, error) {
	iso := m.Isolation
	// The child's share of the disk limit (decompress_lease.go): a first
	// lease now, more when it asks.
	l := &leaser{fsys: m.FS}
	limit := m.FS.DiskLimit()
	if limit > 0 {
		if limit = l.grant(entryMargin); limit == 0 {
			limit = -1
		}
	}
	// The child wrote through its own sandbox: the daemon's count of the
	// server's usage learns it from the disk, whatever happened.
	defer func() {
		l.release()
		_, _ = m.FS.RefreshUsage(context.WithoutCancel(ctx))
	}()
	job, err := json.Marshal(extractJob{
		Dir: root, File: file,
		UID: iso.UID, GID: iso.GID, Denylist: iso.Denylist, DiskLimit: limit, Leased: limit > 0,
	})
	if err != nil {
		return DecompressResult{}, err
	}
	wf, err := openWorkerFiles(m.FS.Root())
	if err != nil {
		return DecompressResult{}, err
	}
	defer wf.close()
	rep, err := m.runWorker(ctx, job, l, wf)
	if err != nil {
		m.undo(wf.journal)
		return DecompressResult{}, deathError(err)
	}
	if rep.Error != nil {
		// The child removed what it had made (its own rollback).
		return rep.Result, rep.Error.err()
	}
	return rep.Result, nil
}

// workerFiles are the descriptors the child gets besides its standard
// streams: 3 the journal, 4 the server's root, 5 its end of the lease
// socket (lease is the daemon's end).
type workerFiles struct {
	journal, root, theirs, lease *os.File
}

func openWorkerFiles(root string) (*workerFiles, error) {
	wf := &workerFiles{}
	var err error
	if wf.journal, err = newJournal(); err != nil {
		return nil, err
	}
	// The server's root is handed to the child open: the server's user may
	// not be allowed to walk the host path to it (system.data is the
	// daemon's).
	if wf.root, err = os.OpenFile(root, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0); err != nil {
		wf.close()
		return nil, err
	}
	if wf.lease, wf.theirs, err = socketPair(); err != nil {
		wf.close()
		return nil, err
	}
	return wf, nil
}

func (wf *workerFiles) close() {
	for _, f := range []*os.File{wf.journal, wf.root, wf.theirs, wf.lease} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// runWorker runs the child, serving its leases meanwhile, and reads its
// answer.
func (m *Manager) runWorker(ctx context.Context, job []byte, l *leaser, wf *workerFiles) (extractReply, error) {
	command := m.Isolation.Command
	if command == nil {
		// The running binary itself, even if it was replaced on disk since
		// (the child speaks the daemon's version of the job), and even if
		// the server's user may not walk the path to it.
		command = []string{"/proc/self/exe", WorkerCommand}
	}
	var wg sync.WaitGroup
	wg.Go(func() { l.serve(wf.lease) })
	out, err := isolate.Run(ctx, isolate.Spec{
		Command: command, Limits: m.Isolation.Limits, UID: m.Isolation.UID, GID: m.Isolation.GID,
		Stdin: job, ExtraFiles: []*os.File{wf.journal, wf.root, wf.theirs},
	})
	// The child is gone: closing the last copy of its end ends serve.
	_ = wf.theirs.Close()
	wf.theirs = nil
	wg.Wait()
	var rep extractReply
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(out.Stdout, &rep); err != nil {
		return rep, fmt.Errorf("decompress: the extractor's answer: %w (stderr: %s)", err, head(out.Stderr))
	}
	return rep, nil
}

// deathError is what the user is told when the child died: a 400 that
// says why (its cause, with the child's first error lines, is logged).
func deathError(err error) error {
	var d *isolate.Death
	if !errors.As(err, &d) {
		return err
	}
	return usererr.Wrap(fmt.Errorf("%w (stderr: %s)", d, head(d.Stderr)),
		usererr.Invalid, "This archive could not be read: "+d.Error()+".")
}

// socketPair is a connected pair of Unix stream sockets.
func socketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("decompress lease socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "lease"), os.NewFile(uintptr(fds[1]), "lease"), nil
}

func head(s string) string {
	if i := strings.Index(s, "\n\n"); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// ---- the journal ----

// A journal record is a kind byte, a name as the extraction gives it to the
// sandbox, and a NUL (which no name holds). The child writes each one with
// a single write before it creates the entry, so that a child killed at
// any point has announced everything it made; what it announced and had
// not yet made is at most the entry each of its workers was about to make.
const (
	journalDir   = 'd' // a directory found missing and about to be made
	journalEntry = 'f' // a file or link about to be made (whatever was there is replaced)
)

// announce records an entry in the journal before it is made.
func (x *extraction) announce(kind byte, name string) error {
	if x.journal == nil {
		return nil
	}
	rec := make([]byte, 0, len(name)+2)
	rec = append(append(append(rec, kind), name...), 0)
	x.mu.Lock()
	defer x.mu.Unlock()
	_, err := x.journal.Write(rec)
	return err
}

// newJournal is an anonymous file in memory (memfd): nothing on disk to
// clean up, gone with its last descriptor.
func newJournal() (*os.File, error) {
	fd, err := unix.MemfdCreate("wharf-extract-journal", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("decompress journal: %w", err)
	}
	return os.NewFile(uintptr(fd), "wharf-extract-journal"), nil
}

// undo removes what a child that did not finish announced, newest first:
// files and links (never a directory in their place: that one was there
// before), and directories it found missing, if they are empty (so nothing
// anyone else put there since goes). What it had not made yet is not there,
// or is what it was about to replace.
func (m *Manager) undo(journal *os.File) {
	if _, err := journal.Seek(0, io.SeekStart); err != nil {
		return
	}
	type record struct {
		kind byte
		name string
	}
	var recs []record
	br := bufio.NewReader(journal)
	for {
		rec, err := br.ReadString(0)
		if err != nil {
			break // EOF, or a record cut short: it made nothing yet
		}
		if len(rec) >= 2 {
			recs = append(recs, record{rec[0], rec[1 : len(rec)-1]})
		}
	}
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		fi, err := m.FS.Lstat(r.name)
		if err != nil || fi.IsDir() != (r.kind == journalDir) {
			continue
		}
		_ = m.FS.Remove(r.name)
	}
}

// ---- the child ----

// ExtractWorkerMain is the child's side (`wharf extract-worker`): it applies
// its limits, reads the job on standard input, extracts through a sandbox
// of the server's root (open on descriptor 4), announcing entries on
// descriptor 3 and asking for shares of the disk limit on descriptor 5, and
// writes the result on standard output.
func ExtractWorkerMain(ctx context.Context) error {
	if err := isolate.Enter(); err != nil {
		return err
	}
	// Entries get their archive's mode at creation, no chmod after.
	sandbox.SetUmask(0)
	journal := os.NewFile(3, "journal")
	if journal == nil {
		return errors.New("no journal descriptor")
	}
	defer journal.Close()
	return runExtractWorker(ctx, os.Stdin, os.Stdout, journal, os.NewFile(5, "lease"))
}

// workerRoot is the server's root in the child: the directory the daemon
// opened for it, reached through its descriptor (no path walk).
const workerRoot = "/proc/self/fd/4"

func runExtractWorker(ctx context.Context, in io.Reader, out, journal io.Writer, lease io.ReadWriter) error {
	var job extractJob
	if err := json.NewDecoder(io.LimitReader(in, 16<<20)).Decode(&job); err != nil {
		return fmt.Errorf("reading the job: %w", err)
	}
	fsys, err := sandbox.New(workerRoot, sandbox.Options{UID: job.UID, GID: job.GID, Denylist: job.Denylist, DiskLimit: job.DiskLimit})
	if err != nil {
		return err
	}
	defer fsys.Close()
	var b *budget
	if job.Leased {
		b = &budget{fsys: fsys, conn: lease}
	}
	res, err := New(fsys).decompressHere(ctx, job.Dir, job.File, journal, b)
	rep := extractReply{Result: res}
	if err != nil {
		rep.Error = replyErrorOf(err)
	}
	return json.NewEncoder(out).Encode(rep)
}
