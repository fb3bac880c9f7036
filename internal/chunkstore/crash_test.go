package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// crashBackend is the local backend of a child process that kills itself
// (SIGKILL, as kill -9) just before its n-th change to the repository (a
// Put, a Delete, a Stage or a Publish), so a test can stop a backup or a
// GC at every step.
type crashBackend struct {
	*LocalBackend
	at  int64
	ops atomic.Int64
	// skipLocks: the leases of a shared repository are not steps.
	skipLocks bool
}

func (c *crashBackend) step(name string) {
	if c.skipLocks && strings.HasPrefix(name, "locks/") {
		return // lease renewals: their number depends on timing
	}
	if c.ops.Add(1) == c.at {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal ends the process
	}
}

func (c *crashBackend) Put(ctx context.Context, name string, data []byte) error {
	c.step(name)
	return c.LocalBackend.Put(ctx, name, data)
}

func (c *crashBackend) Stage(ctx context.Context, name string, data []byte) (Staged, error) {
	c.step(name)
	st, err := c.LocalBackend.Stage(ctx, name, data)
	if err != nil {
		return nil, err
	}
	return crashStaged{st, c, name}, nil
}

type crashStaged struct {
	Staged
	c    *crashBackend
	name string
}

func (s crashStaged) Publish() error {
	s.c.step(s.name)
	return s.Staged.Publish()
}

func (c *crashBackend) Delete(ctx context.Context, name string) error {
	c.step(name)
	return c.LocalBackend.Delete(ctx, name)
}

// The crash scenario's streams: "keep" and "mixed" are in the repository
// before; the child writes "new" (sharing chunks with keep), deletes
// "mixed" (whose pack is then mostly dead: a repack) and runs a GC.
func crashStreams(t *testing.T) (keep, mixed, fresh []byte) {
	k := randomFiles(8, 256<<10, 10)
	o := randomFiles(40, 256<<10, 11)
	n := randomFiles(80, 256<<10, 12)
	return tarOf(t, k), tarOf(t, append(append([][2]string{}, k...), o...)), tarOf(t, append(append([][2]string{}, k[:4]...), n...))
}

// TestCrashChild is the child of TestKill9AtEveryStep (skipped otherwise).
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("WHARF_CHUNKSTORE_CRASH_DIR")
	if dir == "" {
		t.Skip("the child of TestKill9AtEveryStep")
	}
	at, _ := strconv.ParseInt(os.Getenv("WHARF_CHUNKSTORE_CRASH_AT"), 10, 64)
	lb, err := NewLocalBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	cb := &crashBackend{LocalBackend: lb, at: at}
	s, err := OpenBackend(context.Background(), cb)
	if err != nil {
		t.Fatal(err)
	}
	_, _, fresh := crashStreams(t)
	if _, err := s.Write("srv", "new", bytes.NewReader(fresh)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("srv", "mixed"); err != nil {
		t.Fatal(err)
	}
	removed, err := s.GC()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("OPS %d %d\n", cb.ops.Load(), removed)
}

// TestKill9AtEveryStep kills a process writing a backup, deleting one and
// collecting garbage just before each of its changes to the repository:
// after every crash the backups that exist read back whole and equal,
// the one being written is whole or absent, and a GC then a new backup
// of the same bytes work.
func TestKill9AtEveryStep(t *testing.T) {
	if os.Getenv("WHARF_CHUNKSTORE_CRASH_DIR") != "" {
		t.Skip("in the child")
	}
	if outsideRace(t) {
		return
	}
	keep, mixed, fresh := crashStreams(t)
	template := t.TempDir()
	s, err := Open(template)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		id   string
		data []byte
	}{{"mixed", mixed}, {"keep", keep}} {
		if _, err := s.Write("srv", b.id, bytes.NewReader(b.data)); err != nil {
			t.Fatal(err)
		}
	}
	total := -1
	for at := 1; total < 0 || at <= total; at++ {
		dir := t.TempDir()
		if out, err := exec.Command("cp", "-a", template+"/.", dir).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "WHARF_CHUNKSTORE_CRASH_DIR="+dir, "WHARF_CHUNKSTORE_CRASH_AT="+strconv.Itoa(at))
		out, err := runCrashChild(t, cmd)
		var ee *exec.ExitError
		killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
		if !killed {
			if err != nil {
				t.Fatalf("child (crash at %d): %v\n%s", at, err, out)
			}
			var removed int
			i := bytes.Index(out, []byte("OPS "))
			if i < 0 {
				t.Fatalf("child output: %s", out)
			}
			if _, err := fmt.Sscanf(string(out[i:]), "OPS %d %d", &total, &removed); err != nil || removed == 0 {
				t.Fatalf("child output (the GC must remove the mixed backup's blobs): %v %s", err, out)
			}
			t.Logf("%d changes, %d blobs removed", total, removed)
			if at <= total {
				t.Fatalf("the child was not killed at step %d of %d", at, total)
			}
		}
		checkAfterCrash(t, dir, at, map[string][]byte{"keep": keep, "mixed": mixed, "new": fresh})
	}
	if total < 8 {
		t.Fatalf("the scenario made only %d changes", total)
	}
}

// checkAfterCrash opens the repository a crash left, checks every backup
// in it, collects garbage, checks again, and writes "new" again.
func checkAfterCrash(t *testing.T, dir string, at int, want map[string][]byte) {
	t.Helper()
	for round := range 2 {
		s, err := Open(dir)
		if err != nil {
			t.Fatalf("crash at %d: open: %v", at, err)
		}
		ms, err := s.List()
		if err != nil {
			t.Fatalf("crash at %d: %v", at, err)
		}
		seen := map[string]bool{}
		for _, m := range ms {
			seen[m.Backup] = true
			got, err := io.ReadAll(s.Reader(m))
			if err != nil || !bytes.Equal(got, want[m.Backup]) {
				t.Fatalf("crash at %d, round %d: backup %s reads back wrong: %v", at, round, m.Backup, err)
			}
		}
		if !seen["keep"] {
			t.Fatalf("crash at %d: the backup keep is lost", at)
		}
		if round == 0 {
			if _, err := s.GC(); err != nil {
				t.Fatalf("crash at %d: GC: %v", at, err)
			}
			if !seen["new"] {
				if _, err := s.Write("srv", "new", bytes.NewReader(want["new"])); err != nil {
					t.Fatalf("crash at %d: backup after the crash: %v", at, err)
				}
			}
		}
	}
}

// crashChildBound is how long a crash test's child may run (seconds when
// the machine is idle): a child that hangs fails the test with its
// goroutines instead of holding the package until the test binary's
// timeout.
const crashChildBound = 5 * time.Minute

// runCrashChild runs cmd and returns its combined output, like
// CombinedOutput; a child still running after crashChildBound is sent
// SIGQUIT (the Go runtime then prints every goroutine) and the test fails.
func runCrashChild(t *testing.T, cmd *exec.Cmd) ([]byte, error) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	bound := time.NewTimer(crashChildBound)
	defer bound.Stop()
	select {
	case err := <-done:
		return out.Bytes(), err
	case <-bound.C:
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		<-done
		t.Fatalf("the child did not end within %s: %s", crashChildBound, out.Bytes())
		return nil, nil
	}
}
