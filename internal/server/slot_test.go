package server

import (
	"errors"
	"sync"
	"testing"

	"github.com/wharf/wharf/internal/usererr"
)

func TestJobSlotExclusiveJobsNeverOverlap(t *testing.T) {
	var s jobSlot
	end, err := s.begin(JobRestore)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []Job{JobInstall, JobReinstall, JobRestore, JobTransferOut, JobTransferIn, JobBackup, JobFiles} {
		_, err := s.begin(j)
		var busy *BusyError
		if !errors.As(err, &busy) || busy.Running != JobRestore {
			t.Fatalf("begin(%v) during a restore: %v; want a BusyError naming the restore", j, err)
		}
		if !errors.Is(err, ErrBusy) || !errors.Is(err, ErrRestoring) {
			t.Fatalf("begin(%v): %v does not match ErrBusy and ErrRestoring", j, err)
		}
		ue, ok := usererr.From(err)
		if !ok || ue.Kind != usererr.Conflict || ue.Message != "The server is being restored." {
			t.Fatalf("begin(%v): user error %+v", j, ue)
		}
	}
	end()
	end() // a second end changes nothing
	if s.exclusive() != JobNone || s.sharedCount() != 0 {
		t.Fatalf("slot not free after end: %v, %d shared", s.exclusive(), s.sharedCount())
	}
}

func TestJobSlotSharedJobsRunTogetherButBlockExclusive(t *testing.T) {
	var s jobSlot
	endA, err := s.begin(JobBackup)
	if err != nil {
		t.Fatal(err)
	}
	endB, err := s.begin(JobFiles)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.begin(JobTransferOut); !errors.Is(err, ErrBusy) {
		t.Fatalf("an exclusive job started under a backup: %v", err)
	}
	endA()
	if _, err := s.begin(JobTransferOut); !errors.Is(err, ErrBusy) {
		t.Fatalf("an exclusive job started while a file job runs: %v", err)
	}
	endB()
	endA() // ending twice must not free somebody else's share
	end, err := s.begin(JobTransferOut)
	if err != nil {
		t.Fatalf("slot still busy after every shared job ended: %v", err)
	}
	end()
}

func TestJobSlotConcurrentClaimsAdmitOneExclusive(t *testing.T) {
	var s jobSlot
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.begin(JobInstall); err == nil {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d exclusive claims succeeded at once; want 1", won)
	}
}
