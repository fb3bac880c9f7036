package server

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/runtime/runtimetest"
	"github.com/wharf/wharf/internal/testutil/wait"
	"github.com/wharf/wharf/internal/usererr"
)

var sharedJobs = []JobKind{JobBackup, JobFileWrite, JobUpload, JobFileChange, JobCompress, JobDecompress, JobPull, JobSFTP, JobStart}

func TestSlotExclusiveJobsNeverOverlap(t *testing.T) {
	var s jobSlot
	end, err := s.begin(JobRestore, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range append([]JobKind{JobInstall, JobReinstall, JobRestore, JobTransferOut, JobTransferIn}, sharedJobs...) {
		_, err := s.begin(j, 0)
		var busy *BusyError
		if !errors.As(err, &busy) || busy.Running != JobRestore {
			t.Fatalf("begin(%v) during a restore: %v; want a BusyError naming the restore", j, err)
		}
		if !errors.Is(err, ErrBusy) {
			t.Fatalf("begin(%v): %v does not match ErrBusy", j, err)
		}
		ue, ok := usererr.From(err)
		if !ok || ue.Kind != usererr.Conflict || ue.Message != "The server is being restored." {
			t.Fatalf("begin(%v): user error %+v", j, ue)
		}
	}
	end()
	end() // a second end changes nothing
	if !s.idle() {
		t.Fatal("slot not free after end")
	}
}

// Every shared job has its own name and text: a refused exclusive job
// says what runs.
func TestSlotExclusiveRefusalNamesTheSharedJob(t *testing.T) {
	seen := map[string]JobKind{}
	for _, j := range sharedJobs {
		var s jobSlot
		end, err := s.begin(j, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.begin(JobRestore, 0)
		var busy *BusyError
		if !errors.As(err, &busy) || busy.Running != j {
			t.Fatalf("a restore under a %v: %v", j, err)
		}
		ue, _ := usererr.From(err)
		if other, dup := seen[ue.Message]; dup {
			t.Fatalf("%v and %v are refused with the same text %q", j, other, ue.Message)
		}
		seen[ue.Message] = j
		end()
	}
	var s jobSlot
	end, _ := s.begin(JobUpload, 0)
	defer end()
	_, err := s.begin(JobTransferOut, 0)
	if ue, _ := usererr.From(err); ue.Message != "The server's files are being written by a user (file upload); try again when it has finished." {
		t.Fatalf("a transfer during an upload: %q", ue.Message)
	}
}

func TestSlotSharedJobsRunTogetherButBlockExclusive(t *testing.T) {
	var s jobSlot
	endA, err := s.begin(JobBackup, 0)
	if err != nil {
		t.Fatal(err)
	}
	endB, err := s.begin(JobFileWrite, 0)
	if err != nil {
		t.Fatal(err)
	}
	endC, err := s.begin(JobFileWrite, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.begin(JobTransferOut, 0); !errors.Is(err, ErrBusy) {
		t.Fatalf("an exclusive job started under a backup: %v", err)
	}
	endA()
	endB()
	endB() // ending twice must not free somebody else's share
	var busy *BusyError
	if _, err := s.begin(JobTransferOut, 0); !errors.As(err, &busy) || busy.Running != JobFileWrite {
		t.Fatalf("an exclusive job started while a file write runs: %v", err)
	}
	endC()
	end, err := s.begin(JobTransferOut, 0)
	if err != nil {
		t.Fatalf("slot still busy after every shared job ended: %v", err)
	}
	end()
}

// An exclusive job waits (up to its drain) for the shared jobs running,
// and refuses new ones meanwhile, naming itself.
func TestSlotExclusiveWaitsForSharedToDrain(t *testing.T) {
	var s jobSlot
	endW, err := s.begin(JobSFTP, 0)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		end func()
		err error
	}
	got := make(chan result, 1)
	go func() {
		end, err := s.begin(JobRestore, time.Minute)
		got <- result{end, err}
	}()
	wait.For(t, 10*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.pending == JobRestore
	}, "the restore to wait")
	var busy *BusyError
	if _, err := s.begin(JobSFTP, 0); !errors.As(err, &busy) || busy.Running != JobRestore {
		t.Fatalf("a shared job while a restore waits: %v", err)
	}
	if _, err := s.begin(JobTransferOut, 0); !errors.As(err, &busy) || busy.Running != JobRestore {
		t.Fatalf("an exclusive job while a restore waits: %v", err)
	}
	select {
	case r := <-got:
		t.Fatalf("the restore did not wait for the write: %v", r.err)
	default:
	}
	endW()
	r := <-got
	if r.err != nil {
		t.Fatalf("the restore after the write: %v", r.err)
	}
	if s.running() != JobRestore {
		t.Fatalf("running %v", s.running())
	}
	r.end()

	// A shared job still running after the drain refuses it, named.
	endW, _ = s.begin(JobFileWrite, 0)
	defer endW()
	if _, err := s.begin(JobRestore, 10*time.Millisecond); !errors.As(err, &busy) || busy.Running != JobFileWrite {
		t.Fatalf("a restore after the drain: %v", err)
	}
	if end, err := s.begin(JobFileWrite, 0); err != nil {
		t.Fatalf("a shared job after a refused exclusive one: %v", err)
	} else {
		end()
	}
}

func TestSlotConcurrentClaimsAdmitOneExclusive(t *testing.T) {
	var s jobSlot
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := 0; i < 64; i++ {
		j := JobInstall
		if i%2 == 1 {
			j = JobSFTP
		}
		wg.Go(func() {
			if _, err := s.begin(j, time.Millisecond); err == nil && j.Exclusive() {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won > 1 {
		t.Fatalf("%d exclusive claims succeeded at once; want at most 1", won)
	}
}

// Many shared jobs racing an exclusive one: while it holds the slot no
// shared job does, and the count is back to zero at the end.
func TestSlotSharedAndExclusiveRace(t *testing.T) {
	var s jobSlot
	var inShared, inExclusive sync.Map
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			j := sharedJobs[i%len(sharedJobs)]
			if i%10 == 0 {
				j = JobRestore
			}
			end, err := s.begin(j, time.Millisecond)
			if err != nil {
				return
			}
			if j.Exclusive() {
				inExclusive.Store(i, true)
				n := 0
				inShared.Range(func(any, any) bool { n++; return true })
				if n > 0 {
					t.Errorf("an exclusive job runs with %d shared ones", n)
				}
				inExclusive.Delete(i)
			} else {
				inShared.Store(i, true)
				inExclusive.Range(func(k, _ any) bool { t.Errorf("a shared job runs with exclusive %v", k); return false })
				inShared.Delete(i)
			}
			end()
		})
	}
	wg.Wait()
	if !s.idle() {
		t.Fatal("the slot is not free after every job ended")
	}
}

// BeginJob: the job's context ends with the server and at end; a user's
// job is refused while the server is suspended, every job once deleted.
func TestSlotBeginJobContextAndRefusals(t *testing.T) {
	sctx, endServer := context.WithCancel(context.Background())
	s := &Server{ctx: sctx, deps: &Deps{}}
	ctx, end, err := beginJob(s, context.Background(), JobFileWrite)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, end2, err := beginJob(s, context.Background(), JobBackup)
	if err != nil {
		t.Fatal(err)
	}
	end2()
	if !errors.Is(ctx2.Err(), context.Canceled) {
		t.Fatal("the job's context outlived its end")
	}
	endServer()
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), ErrServerGone) {
		t.Fatalf("cause %v, want ErrServerGone", context.Cause(ctx))
	}
	end()
	if !s.jobs.idle() {
		t.Fatal("slot held after end")
	}

	s = &Server{ctx: context.Background(), deps: &Deps{}}
	s.def.Config.Suspended = true
	if _, _, err := beginJob(s, context.Background(), JobSFTP); !errors.Is(err, ErrSuspendedFiles) {
		t.Fatalf("a user's job while suspended: %v", err)
	}
	_, end, err = beginJob(s, context.Background(), JobBackup)
	if err != nil {
		t.Fatalf("a backup while suspended: %v", err)
	}
	end()
	s.deleted = true
	if _, _, err := beginJob(s, context.Background(), JobBackup); !errors.Is(err, ErrDeleted) {
		t.Fatalf("a job once deleted: %v", err)
	}
}

// A restore is no suspension: IsSuspended stays false while it runs.
func TestSlotRestoreIsNoSuspension(t *testing.T) {
	s := &Server{ctx: context.Background(), deps: &Deps{}}
	_, end, err := beginJob(s, context.Background(), JobRestore)
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	if s.IsSuspended() || !s.IsRestoring() {
		t.Fatalf("suspended %v, restoring %v during a restore", s.IsSuspended(), s.IsRestoring())
	}
}

// Delete ends the contexts of the jobs on the server's files and waits for
// them to end before it removes the tree: a user's write never writes into
// a removed tree. New jobs are refused from the start of the deletion.
func TestSlotDeleteCancelsAndWaitsForUserJobs(t *testing.T) {
	e, s := newFakeEnv(t, runtimetest.Process{})
	ctx, end, err := beginJob(s, context.Background(), JobUpload)
	if err != nil {
		t.Fatal(err)
	}
	treeAtEnd := make(chan error, 1)
	go func() {
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), ErrServerGone) {
			t.Errorf("the upload's context ended with %v, want ErrServerGone", context.Cause(ctx))
		}
		// The job is still running (it takes a while to stop): its tree
		// must stay there meanwhile.
		removed := wait.Until(500*time.Millisecond, func() bool {
			_, err := os.Stat(s.DataDir())
			return os.IsNotExist(err)
		})
		if removed {
			treeAtEnd <- errors.New("removed")
		} else {
			treeAtEnd <- nil
		}
		end()
	}()
	if err := e.m.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if err := <-treeAtEnd; err != nil {
		t.Fatalf("the tree was removed under a running job: %v", err)
	}
	if _, err := os.Stat(s.DataDir()); !os.IsNotExist(err) {
		t.Fatalf("the tree is still there after the delete: %v", err)
	}
	if _, _, err := beginJob(s, context.Background(), JobFileWrite); !errors.Is(err, ErrDeleted) {
		t.Fatalf("a job after the delete: %v", err)
	}
}

// What a user's job costs to begin and end (an SFTP write pays it per
// write).
func BenchmarkSlotBeginJobShared(b *testing.B) {
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &Server{ctx: sctx, deps: &Deps{}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, end, err := beginJob(s, context.Background(), JobSFTP)
			if err != nil {
				b.Fatal(err)
			}
			end()
		}
	})
}

// Every kind is a full row of the job table: a name and a busy text of its
// own, user jobs are shared, and exactly the exclusive kinds refuse start,
// stop and restart (never kill).
func TestJobKindTableRows(t *testing.T) {
	names := map[string]JobKind{}
	for j := JobNone + 1; j < numJobs; j++ {
		row := j.row()
		if row.name == "" || row.busy == "" {
			t.Fatalf("kind %d has no name or no busy text: %+v", j, row)
		}
		if other, dup := names[row.name]; dup {
			t.Fatalf("%d and %d share the name %q", j, other, row.name)
		}
		names[row.name] = j
		if row.user && row.exclusive {
			t.Fatalf("%v is a user's job and exclusive", j)
		}
		for _, a := range []PowerAction{PowerStart, PowerStop, PowerRestart} {
			if (j.refusesPower(a) != nil) != row.exclusive {
				t.Fatalf("%v refuses %s: %v; exclusive %v", j, a, j.refusesPower(a), row.exclusive)
			}
		}
		if err := j.refusesPower(PowerKill); err != nil {
			t.Fatalf("%v refuses a kill: %v", j, err)
		}
	}
	if got := numJobs.String(); len(got) < 4 || got[:4] != "job(" {
		t.Fatalf("a kind outside the table: %q", got)
	}
}

// beginJob is BeginJob in the shape of the slot's tests: the job's context
// and its End.
func beginJob(s *Server, ctx context.Context, k JobKind, also ...context.Context) (context.Context, func(), error) {
	j, err := s.BeginJob(ctx, k, also...)
	if err != nil {
		return nil, nil, err
	}
	return j.Context(), j.End, nil
}

// The job handle carries the server's writable filesystem and its kind;
// its context also ends with the contexts it was begun with (the node
// beginning to stop), and End releases the slot.
func TestJobHandle(t *testing.T) {
	_, s := newFakeEnv(t, runtimetest.Process{})
	stopping, stop := context.WithCancel(context.Background())
	job, err := s.BeginJob(context.Background(), JobCompress, nil, stopping)
	if err != nil {
		t.Fatal(err)
	}
	if job.Kind() != JobCompress || job.Server() != s || job.FS().Root() != s.DataDir() {
		t.Fatalf("job %v of %p over %q; want compress of %p over %q", job.Kind(), job.Server(), job.FS().Root(), s, s.DataDir())
	}
	if err := job.FS().WriteFileAtomic("made-by-a-job", strings.NewReader("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Files().ReadFile("made-by-a-job", 10); err != nil || string(b) != "x" {
		t.Fatalf("read back through Files: %q, %v", b, err)
	}
	stop()
	<-job.Context().Done()
	if !errors.Is(context.Cause(job.Context()), context.Canceled) {
		t.Fatalf("cause %v, want context.Canceled", context.Cause(job.Context()))
	}
	if s.jobs.idle() {
		t.Fatal("the slot was released before End")
	}
	job.End()
	job.End()
	if !s.jobs.idle() {
		t.Fatal("the slot is held after End")
	}
}
