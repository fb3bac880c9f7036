// Package isolate runs work that decodes untrusted bytes (a user's archive)
// in a child process of the same binary, so that a decoder's failure cannot
// reach the daemon: the Go runtime's "fatal error: out of memory" is not a
// panic and nothing in a process can recover it, but in a child it ends the
// child only.
//
// The parent (Run) starts the child with:
//   - an address-space limit (RLIMIT_AS) and a CPU-time limit (RLIMIT_CPU),
//     which the child applies to itself first thing (Enter), before it reads
//     any untrusted byte;
//   - a wall-clock limit, and the caller's context: the parent kills the
//     child when either ends;
//   - when the daemon runs as root: a new, empty network namespace
//     (CLONE_NEWNET: no interface but a down loopback) and the credentials
//     it is given (the server files' owner), with no supplementary groups.
//     A daemon that is not root runs the child as its own user in its own
//     network namespace (it has no right to do otherwise); the limits apply
//     all the same;
//   - Pdeathsig SIGKILL: a child never outlives the daemon;
//   - an empty environment and no descriptors but stdin, stdout, stderr and
//     the ones the caller passes.
//
// A child that does not exit with status 0 is reported as a *Death that
// says why (its memory or CPU limit, the wall-clock limit, a signal, an exit
// status), for the caller to turn into a user's error.
package isolate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound one child.
type Limits struct {
	// Memory is the address space in bytes (RLIMIT_AS) the child may map
	// beyond what it has mapped when it applies its limits; 0 means no
	// limit. The Go runtime reserves over 1 GiB of address space at start
	// that it never touches (the page allocator's index), which a plain
	// RLIMIT_AS would count: the limit is set on top of it.
	Memory int64
	// CPU is the child's CPU time (RLIMIT_CPU, whole seconds, at least 1);
	// 0 means no limit.
	CPU time.Duration
	// Wall is how long the child may run before the parent kills it; 0
	// means no limit.
	Wall time.Duration
}

// Spec describes one child.
type Spec struct {
	// Command is the program and its arguments: the daemon's own binary and
	// a hidden subcommand.
	Command []string
	Limits  Limits
	// UID and GID are the child's credentials when the parent runs as root;
	// -1 keeps the parent's.
	UID, GID int
	// Stdin is what the child reads on its standard input (the job).
	Stdin []byte
	// ExtraFiles are the child's descriptors 3, 4, ...
	ExtraFiles []*os.File
	// MaxOutput bounds what is kept of the child's standard output (1 MiB
	// when 0); the child's standard error is kept up to 16 KiB, for the log.
	MaxOutput int
}

// Result is what a child that exited with status 0 wrote, and what it cost.
type Result struct {
	Stdout []byte
	Stderr string
	// CPU is the child's user and system CPU time.
	CPU time.Duration
	// NetworkIsolated says the child ran in a network namespace of its own.
	NetworkIsolated bool
}

// Reason says why a child died.
type Reason int

// The reasons a child did not succeed.
const (
	// Exited: it exited with a status other than 0.
	Exited Reason = iota + 1
	// OutOfMemory: it reached its address-space limit (the Go runtime's
	// "out of memory" fatal error).
	OutOfMemory
	// OutOfCPU: it reached its CPU-time limit (SIGXCPU, then SIGKILL).
	OutOfCPU
	// TimedOut: it ran longer than its wall-clock limit and was killed.
	TimedOut
	// Signaled: another signal ended it.
	Signaled
)

// Death is the error of a child that did not exit with status 0 (its
// caller's context ending is not a Death: Run returns the context's error).
type Death struct {
	Reason   Reason
	Limits   Limits
	ExitCode int            // Exited
	Signal   syscall.Signal // Signaled
	// Stderr is the head of what the child wrote on its standard error (a
	// Go runtime's fatal error and trace), for the log only.
	Stderr string
	CPU    time.Duration
}

func (d *Death) Error() string {
	switch d.Reason {
	case OutOfMemory:
		return fmt.Sprintf("it needs more memory than the %d MiB a decompression may use", d.Limits.Memory>>20)
	case OutOfCPU:
		return fmt.Sprintf("it needs more than the %s of CPU time a decompression may use", d.Limits.CPU)
	case TimedOut:
		return fmt.Sprintf("it took longer than the %s a decompression may last", d.Limits.Wall)
	case Signaled:
		return fmt.Sprintf("its decoder was killed by signal %s", d.Signal)
	}
	return fmt.Sprintf("its decoder failed (exit status %d)", d.ExitCode)
}

// limitsEnv carries the limits to the child: "memory,cpu-seconds".
const limitsEnv = "WHARF_ISOLATE_LIMITS"

// Run starts the child, waits for it, and returns its output, or a *Death,
// or the context's error when ctx ended first (the child is then killed and
// waited for before Run returns).
func Run(ctx context.Context, spec Spec) (Result, error) {
	if len(spec.Command) == 0 {
		return Result{}, errors.New("isolate: no command")
	}
	wctx := ctx
	if spec.Limits.Wall > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, spec.Limits.Wall)
		defer cancel()
	}
	maxOut := spec.MaxOutput
	if maxOut <= 0 {
		maxOut = 1 << 20
	}
	netns := os.Geteuid() == 0
	var (
		cmd            *exec.Cmd
		stdout, stderr *headBuffer
		err            error
	)
	for {
		stdout, stderr = &headBuffer{max: maxOut}, &headBuffer{max: 16 << 10}
		cmd = command(wctx, spec, netns, stdout, stderr)
		err = cmd.Start()
		// A root daemon without CAP_SYS_ADMIN (a container with the default
		// capabilities and seccomp profile) cannot make a namespace: run the
		// child in the daemon's, with every other limit.
		if err != nil && netns && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL)) {
			netns = false
			continue
		}
		break
	}
	if err != nil {
		return Result{}, fmt.Errorf("isolate: start %s: %w", spec.Command[0], err)
	}
	werr := cmd.Wait()
	res := Result{Stdout: stdout.Bytes(), Stderr: stderr.String(), NetworkIsolated: netns}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if werr == nil {
		return res, nil
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, death(wctx, spec.Limits, cmd.ProcessState, res)
}

func command(ctx context.Context, spec Spec, netns bool, stdout, stderr *headBuffer) *exec.Cmd {
	cmd := exec.CommandContext(ctx, spec.Command[0], spec.Command[1:]...)
	cmd.Env = []string{limitsEnv + "=" + strconv.FormatInt(spec.Limits.Memory, 10) + "," +
		strconv.FormatInt(int64(spec.Limits.CPU/time.Second), 10)}
	cmd.Stdin = bytes.NewReader(spec.Stdin)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = spec.ExtraFiles
	cmd.WaitDelay = 5 * time.Second
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		if netns {
			attr.Cloneflags = syscall.CLONE_NEWNET
		}
		if spec.UID >= 0 && spec.GID >= 0 {
			attr.Credential = &syscall.Credential{Uid: uint32(spec.UID), Gid: uint32(spec.GID)}
		}
	}
	cmd.SysProcAttr = attr
	return cmd
}

// death classifies how the child ended.
func death(wctx context.Context, l Limits, ps *os.ProcessState, res Result) *Death {
	d := &Death{Limits: l, Stderr: res.Stderr, CPU: res.CPU, ExitCode: ps.ExitCode()}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	switch {
	case errors.Is(wctx.Err(), context.DeadlineExceeded):
		d.Reason = TimedOut
	case ws.Signaled() && (ws.Signal() == syscall.SIGXCPU ||
		ws.Signal() == syscall.SIGKILL && l.CPU > 0 && res.CPU >= l.CPU):
		d.Reason = OutOfCPU
	case ws.Signaled():
		d.Reason, d.Signal = Signaled, ws.Signal()
	case outOfMemory(res.Stderr):
		d.Reason = OutOfMemory
	default:
		d.Reason = Exited
	}
	return d
}

// outOfMemory recognises the Go runtime's fatal errors when a mapping is
// refused, which under RLIMIT_AS means the limit was reached: "out of
// memory", "cannot allocate memory", and with the race detector "too many
// address space collisions".
func outOfMemory(stderr string) bool {
	for _, s := range []string{"out of memory", "cannot allocate memory", "address space collisions"} {
		if strings.Contains(stderr, "fatal error: ") && strings.Contains(stderr, s) {
			return true
		}
	}
	return false
}

// Enter is the child's first step: it applies the limits Run passed (its
// address space, its CPU time, no core dump) and tells the Go collector to
// work harder before the address space runs out. It fails when the process
// was not started by Run.
func Enter() error {
	v, ok := os.LookupEnv(limitsEnv)
	if !ok {
		return errors.New("this command is run by the daemon, not by hand")
	}
	mem, cpu, ok := strings.Cut(v, ",")
	if !ok {
		return fmt.Errorf("bad %s %q", limitsEnv, v)
	}
	memory, err1 := strconv.ParseInt(mem, 10, 64)
	seconds, err2 := strconv.ParseInt(cpu, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("bad %s %q: %w", limitsEnv, v, err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return fmt.Errorf("RLIMIT_CORE: %w", err)
	}
	if memory > 0 {
		base, err := addressSpace()
		if err != nil {
			return err
		}
		as := uint64(base + memory)
		if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: as, Max: as}); err != nil {
			return fmt.Errorf("RLIMIT_AS: %w", err)
		}
		// The collector keeps the heap well below the address space, so that
		// garbage does not end a child whose live data fits.
		debug.SetMemoryLimit(memory / 2)
	}
	if seconds > 0 {
		// SIGXCPU at the soft limit, SIGKILL one second later.
		lim := unix.Rlimit{Cur: uint64(seconds), Max: uint64(seconds) + 1}
		if err := unix.Setrlimit(unix.RLIMIT_CPU, &lim); err != nil {
			return fmt.Errorf("RLIMIT_CPU: %w", err)
		}
	}
	return nil
}

// addressSpace is this process's mapped address space in bytes (VmSize).
func addressSpace() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmSize:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmSize %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmSize in /proc/self/status")
}

// headBuffer keeps the first max bytes written to it and drops the rest
// (the child's output is read whole; a runaway child cannot grow the
// daemon's memory).
type headBuffer struct {
	bytes.Buffer
	max int
}

func (h *headBuffer) Write(p []byte) (int, error) {
	if room := h.max - h.Len(); room > 0 {
		h.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
