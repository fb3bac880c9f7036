package server

import (
	"fmt"
	"sync/atomic"

	"github.com/wharf/wharf/internal/usererr"
)

// Job is a piece of work that owns a server's files for a while.
//
// Exclusive jobs rewrite the tree (install, reinstall, restore, the two
// transfers): at most one runs at a time, and never while a shared job runs.
// Shared jobs only read the tree or add to it (a backup, a file manager
// archive, extraction or remote download): any number run together, but never
// while an exclusive job runs.
type Job uint8

// The jobs. JobNone means the slot is free.
const (
	JobNone Job = iota
	JobInstall
	JobReinstall
	JobRestore
	JobTransferOut
	JobTransferIn

	// Shared jobs.
	JobBackup
	JobFiles // compress, decompress, remote download
)

// Exclusive reports whether j rewrites the server's tree.
func (j Job) Exclusive() bool { return j >= JobInstall && j <= JobTransferIn }

func (j Job) String() string {
	switch j {
	case JobNone:
		return "none"
	case JobInstall:
		return "install"
	case JobReinstall:
		return "reinstall"
	case JobRestore:
		return "restore"
	case JobTransferOut:
		return "outgoing transfer"
	case JobTransferIn:
		return "incoming transfer"
	case JobBackup:
		return "backup"
	case JobFiles:
		return "file job"
	}
	return fmt.Sprintf("job(%d)", uint8(j))
}

// busyText is what a refused caller is told about the running job.
func (j Job) busyText() string {
	switch j {
	case JobInstall:
		return "The server is being installed."
	case JobReinstall:
		return "The server is being reinstalled."
	case JobRestore:
		return "The server is being restored."
	case JobTransferOut, JobTransferIn:
		return "The server is being transferred."
	case JobBackup, JobFiles:
		return "The server is being backed up or its files are being archived; try again when that has finished."
	}
	return "The server is busy."
}

// ErrBusy is in the chain of every refusal of the job slot.
var ErrBusy = usererr.New(usererr.Conflict, "The server is busy with another job.")

// BusyError says which job holds the slot. Its user message names it; it
// matches ErrBusy, and also the flag error of the running exclusive job
// (ErrInstalling, ErrRestoring, ErrTransferring), so older checks still hold.
type BusyError struct {
	Running Job
}

func (e *BusyError) Error() string { return e.Running.busyText() }

// Unwrap gives the user-visible error (409) naming the running job.
func (e *BusyError) Unwrap() []error {
	errs := []error{usererr.Wrap(ErrBusy, usererr.Conflict, e.Running.busyText())}
	switch e.Running {
	case JobInstall, JobReinstall:
		errs = append(errs, ErrInstalling)
	case JobRestore:
		errs = append(errs, ErrRestoring)
	case JobTransferOut, JobTransferIn:
		errs = append(errs, ErrTransferring)
	}
	return errs
}

// jobSlot is one server's job slot: one word, changed only by
// compare-and-swap. The low byte is the exclusive job (JobNone when free);
// the rest counts the shared jobs running.
type jobSlot struct {
	word atomic.Uint64
}

const sharedOne = 1 << 8

func (s *jobSlot) exclusive() Job { return Job(s.word.Load() & 0xff) }

func (s *jobSlot) sharedCount() uint64 { return s.word.Load() >> 8 }

// negate returns -x in two's complement, to subtract with atomic Add.
func negate(x uint64) uint64 { return ^x + 1 }

// begin claims the slot for j; the returned end releases it exactly once.
// An exclusive job is refused while any job runs; a shared job while an
// exclusive one runs.
func (s *jobSlot) begin(j Job) (end func(), err error) {
	if j == JobNone {
		return nil, fmt.Errorf("begin: no job given")
	}
	for {
		old := s.word.Load()
		running := Job(old & 0xff)
		if running != JobNone {
			return nil, &BusyError{Running: running}
		}
		var next uint64
		if j.Exclusive() {
			if old>>8 != 0 {
				return nil, &BusyError{Running: JobBackup}
			}
			next = uint64(j)
		} else {
			next = old + sharedOne
		}
		if s.word.CompareAndSwap(old, next) {
			break
		}
	}
	var ended atomic.Bool
	return func() {
		if !ended.CompareAndSwap(false, true) {
			return
		}
		if j.Exclusive() {
			s.word.Add(negate(uint64(j)))
			return
		}
		s.word.Add(negate(sharedOne))
	}, nil
}

// BeginJob claims the server's job slot for j. A second exclusive job, an
// exclusive job while a shared one runs, or a shared job while an exclusive
// one runs is refused with a *BusyError (409, naming the running job). The
// caller must call end when the job is over, whatever its outcome.
func (s *Server) BeginJob(j Job) (end func(), err error) {
	return s.jobs.begin(j)
}

// RunningJob returns the exclusive job that holds the slot, JobNone when
// none does.
func (s *Server) RunningJob() Job { return s.jobs.exclusive() }
