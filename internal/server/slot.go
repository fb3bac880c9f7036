package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/wharf/wharf/internal/usererr"
)

// JobKind is a kind of work that owns a server's files for a while. The
// job slot (BeginJob) is the only door to them: every change to a server's
// files, by the agent or by a user, holds it while it runs, and writes
// through the filesystem of the *Job it returns.
//
// Exclusive jobs rewrite the tree (install, reinstall, restore, the two
// transfers): at most one runs at a time, and never while a shared job runs.
// Shared jobs only read the tree or add to it (a backup, and every change a
// user makes: file manager, uploads, archives, remote downloads, SFTP): any
// number run together, but never while an exclusive job runs.
//
// What a kind is (its class, its name, what a refused caller reads, what
// power actions it refuses) is its row of jobKinds; the order of the
// constants means nothing.
type JobKind uint8

// The job kinds. JobNone means the slot is free.
const (
	JobNone JobKind = iota
	JobInstall
	JobReinstall
	JobRestore
	JobTransferOut
	JobTransferIn
	JobBackup
	JobFileWrite  // the file manager writes a file (files/write)
	JobUpload     // a signed upload
	JobFileChange // rename, delete, chmod, copy, create-directory
	JobCompress   // the file manager makes an archive
	JobDecompress // the file manager extracts an archive
	JobPull       // a remote download
	JobSFTP       // an SFTP write or change
	JobStart      // a start's writes: the egg's configuration files, the ownership fix

	numJobs
)

// jobKind is a row of the job table.
type jobKind struct {
	name      string
	exclusive bool // rewrites the tree: runs alone
	user      bool // a user's change: refused while the server is suspended
	busy      string
	// power is the error that refuses start, stop and restart while a job
	// of this kind holds the slot (kill is always allowed); nil: none.
	power error
}

// later ends the busy text of a short job.
const later = "; try again when it has finished."

// jobKinds is the job table: one row per kind. A new job kind is a new
// constant and its row here.
var jobKinds = [numJobs]jobKind{
	JobNone:        {name: "none", busy: "The server is busy."},
	JobInstall:     {name: "install", exclusive: true, busy: "The server is being installed.", power: ErrInstalling},
	JobReinstall:   {name: "reinstall", exclusive: true, busy: "The server is being reinstalled.", power: ErrInstalling},
	JobRestore:     {name: "restore", exclusive: true, busy: "The server is being restored.", power: ErrRestoring},
	JobTransferOut: {name: "outgoing transfer", exclusive: true, busy: "The server is being transferred.", power: ErrTransferring},
	JobTransferIn:  {name: "incoming transfer", exclusive: true, busy: "The server is being transferred.", power: ErrTransferring},
	JobBackup:      {name: "backup", busy: "The server is being backed up" + later},
	JobFileWrite:   {name: "file write", user: true, busy: "The server's files are being written by a user (file manager)" + later},
	JobUpload:      {name: "file upload", user: true, busy: "The server's files are being written by a user (file upload)" + later},
	JobFileChange:  {name: "file change", user: true, busy: "The server's files are being changed by a user (rename, delete, copy or permissions)" + later},
	JobCompress:    {name: "compress", user: true, busy: "The server's files are being archived by a user (compress)" + later},
	JobDecompress:  {name: "decompress", user: true, busy: "An archive is being extracted into the server's files (decompress)" + later},
	JobPull:        {name: "remote download", user: true, busy: "A file is being downloaded into the server's files (remote download)" + later},
	JobSFTP:        {name: "SFTP write", user: true, busy: "The server's files are being written by a user (SFTP)" + later},
	JobStart:       {name: "start", busy: "The server's files are being prepared for its start (configuration files, ownership)" + later},
}

// row is j's row of the table; a kind outside it has no name and no class.
func (j JobKind) row() jobKind {
	if j >= numJobs {
		return jobKind{busy: "The server is busy."}
	}
	return jobKinds[j]
}

// Exclusive reports whether j rewrites the server's tree.
func (j JobKind) Exclusive() bool { return j.row().exclusive }

// User reports whether j is a change a user makes: refused while the
// server is suspended.
func (j JobKind) User() bool { return j.row().user }

func (j JobKind) String() string {
	if n := j.row().name; n != "" {
		return n
	}
	return fmt.Sprintf("job(%d)", uint8(j))
}

// busyText is what a refused caller is told about the running job.
func (j JobKind) busyText() string { return j.row().busy }

// refusesPower is the error refusing the power action a while a job of
// kind j holds the slot, nil when j allows it. Kill is always allowed.
func (j JobKind) refusesPower(a PowerAction) error {
	if a == PowerKill {
		return nil
	}
	return j.row().power
}

// ErrBusy is in the chain of every refusal of the job slot.
var ErrBusy = usererr.New(usererr.Conflict, "The server is busy with another job.")

// ErrSuspendedFiles refuses a user's change to the files of a suspended server.
var ErrSuspendedFiles = usererr.New(usererr.Conflict, "This server is suspended: its files cannot be changed.")

// BusyError says which job holds the slot. Its user message (409) names it;
// it matches ErrBusy.
type BusyError struct {
	Running JobKind
}

func (e *BusyError) Error() string { return e.Running.busyText() }

// Unwrap gives the user-visible error (409) naming the running job.
func (e *BusyError) Unwrap() error {
	return usererr.Wrap(ErrBusy, usererr.Conflict, e.Running.busyText())
}

// jobSlot is one server's job slot.
type jobSlot struct {
	mu        sync.Mutex
	exclusive JobKind       // JobNone when no exclusive job runs
	pending   JobKind       // an exclusive job waiting for the shared ones to end
	shared    [numJobs]int  // the shared jobs running, by kind
	ended     chan struct{} // closed and replaced when a shared job ends
}

// sharedLocked returns a shared job that runs (the first by kind),
// JobNone when none does.
func (s *jobSlot) sharedLocked() JobKind {
	for j, n := range s.shared {
		if n > 0 {
			return JobKind(j)
		}
	}
	return JobNone
}

func (s *jobSlot) running() JobKind {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exclusive
}

// idle reports whether no job holds the slot.
func (s *jobSlot) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exclusive == JobNone && s.sharedLocked() == JobNone
}

// waitShared waits until no shared job runs, or ctx ends.
func (s *jobSlot) waitShared(ctx context.Context) error {
	for {
		s.mu.Lock()
		if s.sharedLocked() == JobNone {
			s.mu.Unlock()
			return nil
		}
		ch := s.endedLocked()
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *jobSlot) endedLocked() chan struct{} {
	if s.ended == nil {
		s.ended = make(chan struct{})
	}
	return s.ended
}

// begin claims the slot for j; the returned end releases it exactly once.
// A shared job is refused while an exclusive one runs or waits. An
// exclusive job is refused while another exclusive one runs or waits; while
// shared jobs run it waits for them up to drain (new shared jobs are refused
// meanwhile, naming it), and is refused naming one of them if they are
// still running then. The drain lets an exclusive job pass between the
// short holds of an SFTP upload, while a long user job refuses it.
func (s *jobSlot) begin(j JobKind, drain time.Duration) (end func(), err error) {
	if j == JobNone || j >= numJobs {
		return nil, fmt.Errorf("begin: no job given")
	}
	s.mu.Lock()
	if s.exclusive != JobNone || s.pending != JobNone {
		running := s.exclusive
		if running == JobNone {
			running = s.pending
		}
		s.mu.Unlock()
		return nil, &BusyError{Running: running}
	}
	if !j.Exclusive() {
		s.shared[j]++
		s.mu.Unlock()
		return s.ender(j), nil
	}
	if s.sharedLocked() != JobNone && drain > 0 {
		s.pending = j
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), drain)
		_ = s.waitShared(ctx)
		cancel()
		s.mu.Lock()
		s.pending = JobNone
	}
	if running := s.sharedLocked(); running != JobNone {
		s.mu.Unlock()
		return nil, &BusyError{Running: running}
	}
	s.exclusive = j
	s.mu.Unlock()
	return s.ender(j), nil
}

func (s *jobSlot) ender(j JobKind) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if j.Exclusive() {
				s.exclusive = JobNone
				return
			}
			s.shared[j]--
			if s.ended != nil {
				close(s.ended)
				s.ended = nil
			}
		})
	}
}

// defaultDrainWait is how long an exclusive job waits for the shared jobs
// running when it is asked for (Deps.JobDrainWait).
const defaultDrainWait = 2 * time.Second

// BeginJob claims the server's job slot for a job of kind j and returns
// it: its writable filesystem (Job.FS), its context (Job.Context: it ends
// with ctx, with each of also, at End, and when the server ends: deleted,
// or no longer managed by the daemon, the cause is ErrServerGone). The
// caller must call End when the job is over, whatever its outcome.
//
// A refusal is a *BusyError (409) naming the running job: a second
// exclusive job, a shared job while an exclusive one runs, an exclusive job
// while a shared one still runs after a short wait (Deps.JobDrainWait). A
// user's job (j.User) is also refused while the server is suspended
// (ErrSuspendedFiles), and every job once the server is deleted.
func (s *Server) BeginJob(ctx context.Context, j JobKind, also ...context.Context) (*Job, error) {
	s.mu.RLock()
	deleted, suspended := s.deleted, s.def.Config.Suspended
	s.mu.RUnlock()
	if deleted {
		return nil, ErrDeleted
	}
	if suspended && j.User() {
		return nil, ErrSuspendedFiles
	}
	drain := s.deps.JobDrainWait
	if drain == 0 {
		drain = defaultDrainWait
	}
	release, err := s.jobs.begin(j, drain)
	if err != nil {
		return nil, err
	}
	jctx, stop := s.lifetime(ctx, also)
	return &Job{kind: j, srv: s, fs: s.files, ctx: jctx, end: func() {
		stop()
		release()
	}}, nil
}

// RunningJob returns the exclusive job that holds the slot, JobNone when
// none does.
func (s *Server) RunningJob() JobKind { return s.jobs.running() }
