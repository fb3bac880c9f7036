// Package runtimetest is an in-memory runtime.Runtime for unit tests of the
// code that drives containers, in the manner of Nomad's mock driver: each
// container runs a fake process whose behaviour the test chooses (whether
// it obeys its stop command and signals, how long a start takes), so that
// power actions can be tested without a container engine.
package runtimetest

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/wharf/wharf/internal/runtime"
)

var (
	_ runtime.Runtime       = (*Runtime)(nil)
	_ runtime.RunningLister = (*Runtime)(nil)
)

// Process is how the fake process of a container behaves.
type Process struct {
	// StopCommand is the console line that makes the process exit 0.
	// Empty: no line does, the process ignores its stop command. Any
	// other line is answered with "Unknown command: <line>".
	StopCommand string
	// CrashCommand is the console line that makes the process print
	// "Segmentation fault" and exit 139, as a game that crashes. Empty: none.
	CrashCommand string
	// IgnoreSignals makes the process ignore every signal but SIGKILL,
	// and so the engine's stop too, which kills it after its timeout.
	IgnoreSignals bool
	// DoneLine is printed once the process runs; "Done (0.1s)!" when empty.
	DoneLine string
	// StartGate, when not nil, holds Start until it is closed or the
	// caller's context ends (a slow engine).
	StartGate <-chan struct{}
}

// Runtime is the fake engine. It is safe for concurrent use.
type Runtime struct {
	mu         sync.Mutex
	proc       Process
	containers map[string]*container
	calls      []string
	attachGate <-chan struct{}
}

// New returns an engine whose containers behave as p from their next start.
func New(p Process) *Runtime {
	return &Runtime{proc: p, containers: map[string]*container{}}
}

// SetProcess changes the behaviour of the processes started from now on.
func (r *Runtime) SetProcess(p Process) {
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
}

// Calls lists what was asked of the engine, in order: "start <name>",
// "stop <name>", "signal <name> <signal>", "create <name>", "remove <name>".
func (r *Runtime) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// Count returns how many calls equal call.
func (r *Runtime) Count(call string) int {
	n := 0
	for _, c := range r.Calls() {
		if c == call {
			n++
		}
	}
	return n
}

// Running reports whether the container's process runs.
func (r *Runtime) Running(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[name]
	return ok && c.running
}

// container is one fake container; its fields are guarded by Runtime.mu.
type container struct {
	spec      runtime.ContainerSpec
	proc      Process
	running   bool
	last      runtime.State
	startedAt time.Time
	out       *pipe         // the output of the current (or next) run
	exited    chan struct{} // closed when the current run ends
	log       []string
}

func (r *Runtime) record(format string, args ...any) {
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

// get returns the container; r.mu is held.
func (r *Runtime) get(name string) (*container, error) {
	c, ok := r.containers[name]
	if !ok {
		return nil, fmt.Errorf("container %s: %w", name, runtime.ErrNotFound)
	}
	return c, nil
}

// say prints a line of the process; r.mu is held.
func (c *container) say(line string) {
	c.log = append(c.log, line)
	c.out.write(line + "\n")
}

// exitLocked ends the process with code; r.mu is held.
func (c *container) exitLocked(code int) {
	if !c.running {
		return
	}
	c.running = false
	c.last = runtime.State{ExitCode: code, StartedAt: c.startedAt}
	close(c.exited)
	c.out.close()
}

// EnsureImage does nothing: every image exists.
func (r *Runtime) EnsureImage(context.Context, string, *runtime.RegistryAuth, func(string)) error {
	return nil
}

// Create replaces any container of that name with a new, stopped one.
func (r *Runtime) Create(_ context.Context, spec runtime.ContainerSpec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("create %s", spec.Name)
	if old, ok := r.containers[spec.Name]; ok {
		old.exitLocked(137)
	}
	r.containers[spec.Name] = &container{spec: spec, out: newPipe(), exited: closedChan()}
	return nil
}

// HoldAttach makes every Attach from now on wait until gate is closed or
// the caller's context ends (a slow engine at boot); nil lets them through.
func (r *Runtime) HoldAttach(gate <-chan struct{}) {
	r.mu.Lock()
	r.attachGate = gate
	r.mu.Unlock()
}

// Attach returns the container's stdin and the output of its current (or
// next) run, which ends when the process exits.
func (r *Runtime) Attach(ctx context.Context, name string) (runtime.Stream, error) {
	r.mu.Lock()
	gate := r.attachGate
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.get(name)
	if err != nil {
		return nil, err
	}
	if c.running && c.out.left() {
		// A new attachment to a running process (a daemon's re-attach
		// after the previous one closed its own): output from now on.
		c.out = newPipe()
	}
	return &stream{r: r, c: c, out: c.out}, nil
}

// Start runs the container's process, after the StartGate when there is one.
func (r *Runtime) Start(ctx context.Context, name string) error {
	r.mu.Lock()
	gate := r.proc.StartGate
	r.record("start %s", name)
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.get(name)
	if err != nil {
		return err
	}
	if c.running {
		return nil
	}
	if c.out.isClosed() {
		c.out = newPipe() // a restart of an exited container: new output
	}
	c.proc = r.proc
	c.running, c.startedAt, c.exited = true, time.Now(), make(chan struct{})
	c.say("Starting fake process")
	done := c.proc.DoneLine
	if done == "" {
		done = "Done (0.1s)!"
	}
	c.say(done)
	return nil
}

// Stop is the engine's stop: SIGTERM, then SIGKILL after timeout (never,
// when timeout < 0) unless the process exited.
func (r *Runtime) Stop(ctx context.Context, name string, timeout time.Duration) error {
	r.mu.Lock()
	r.record("stop %s", name)
	c, err := r.get(name)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	if !c.proc.IgnoreSignals {
		c.exitLocked(0)
	}
	exited := c.exited
	r.mu.Unlock()
	var expire <-chan time.Time
	if timeout >= 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire = t.C
	}
	select {
	case <-exited:
		return nil
	case <-expire:
		r.mu.Lock()
		c.exitLocked(137)
		r.mu.Unlock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Signal sends sig to the process: SIGKILL always ends it, other signals
// unless it ignores them.
func (r *Runtime) Signal(_ context.Context, name, sig string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("signal %s %s", name, sig)
	c, err := r.get(name)
	if err != nil {
		return err
	}
	if !c.running {
		return runtime.ErrNotRunning
	}
	switch {
	case sig == "SIGKILL":
		c.exitLocked(137)
	case !c.proc.IgnoreSignals:
		c.say("Signal received: " + sig)
		c.exitLocked(0)
	}
	return nil
}

// Wait blocks until the process is not running and returns its state.
func (r *Runtime) Wait(ctx context.Context, name string) (runtime.State, error) {
	r.mu.Lock()
	c, err := r.get(name)
	if err != nil {
		r.mu.Unlock()
		return runtime.State{}, err
	}
	exited := c.exited
	r.mu.Unlock()
	select {
	case <-exited:
	case <-ctx.Done():
		return runtime.State{}, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return c.last, nil
}

// ListRunning returns the names of the running containers, recorded as
// the call "list".
func (r *Runtime) ListRunning(context.Context) (map[string]bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("list")
	out := map[string]bool{}
	for name, c := range r.containers {
		if c.running {
			out[name] = true
		}
	}
	return out, nil
}

// Inspect returns the container's state.
func (r *Runtime) Inspect(_ context.Context, name string) (runtime.State, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.get(name)
	if err != nil {
		return runtime.State{}, err
	}
	if c.running {
		return runtime.State{Running: true, StartedAt: c.startedAt}, nil
	}
	return c.last, nil
}

// Stats sends no samples; the channel is closed when ctx ends or the
// process exits.
func (r *Runtime) Stats(ctx context.Context, name string) (<-chan runtime.Stats, error) {
	r.mu.Lock()
	c, err := r.get(name)
	if err != nil {
		r.mu.Unlock()
		return nil, err
	}
	exited := c.exited
	r.mu.Unlock()
	ch := make(chan runtime.Stats)
	go func() {
		defer close(ch)
		select {
		case <-ctx.Done():
		case <-exited:
		}
	}()
	return ch, nil
}

// Update accepts any limits.
func (r *Runtime) Update(_ context.Context, name string, _ runtime.Limits) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := r.get(name)
	return err
}

// Logs returns up to the last n lines the container printed.
func (r *Runtime) Logs(_ context.Context, name string, n int) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.get(name)
	if err != nil {
		return nil, err
	}
	return append([]string(nil), c.log[max(0, len(c.log)-n):]...), nil
}

// Remove kills and removes the container; a missing one is no error.
func (r *Runtime) Remove(_ context.Context, name, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("remove %s", name)
	if c, ok := r.containers[name]; ok {
		c.exitLocked(137)
		delete(r.containers, name)
	}
	return nil
}

// EnsureNetwork reports an existing network as the spec asks for it (a
// bridge when no driver is named), so that a daemon on the fake runtime
// keeps its configured network settings.
func (r *Runtime) EnsureNetwork(_ context.Context, spec runtime.NetworkSpec) (runtime.NetworkInfo, error) {
	driver := spec.Driver
	if driver == "" {
		driver = "bridge"
	}
	return runtime.NetworkInfo{Driver: driver, IPv4Subnet: spec.IPv4Subnet, IPv4Gate: spec.IPv4Gate}, nil
}

// stream is an attachment: the output of one run and the process's stdin.
type stream struct {
	r   *Runtime
	c   *container
	out *pipe
}

func (s *stream) Read(p []byte) (int, error) { return s.out.read(p) }

// Write feeds stdin: each line is a command to the process.
func (s *stream) Write(p []byte) (int, error) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if !s.c.running || s.c.out != s.out {
		return 0, fmt.Errorf("write to an exited process")
	}
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		switch {
		case line == "":
		case s.c.proc.StopCommand != "" && line == s.c.proc.StopCommand:
			s.c.say("Stopping")
			s.c.exitLocked(0)
			return len(p), nil
		case s.c.proc.CrashCommand != "" && line == s.c.proc.CrashCommand:
			s.c.say("Segmentation fault")
			s.c.exitLocked(139)
			return len(p), nil
		default:
			s.c.say("Unknown command: " + line)
		}
	}
	return len(p), nil
}

// Close ends this attachment; the process is not touched.
func (s *stream) Close() error {
	s.out.closeRead()
	return nil
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// pipe is an unbounded in-memory pipe: writes never block, reads wait for
// data, end with io.EOF once it is closed and drained, and at once when the
// reader closed it.
type pipe struct {
	mu     sync.Mutex
	buf    []byte
	closed bool          // no more writes
	gone   bool          // the reader left
	ready  chan struct{} // closed and replaced when something changes
}

func newPipe() *pipe { return &pipe{ready: make(chan struct{})} }

func (p *pipe) signal() {
	close(p.ready)
	p.ready = make(chan struct{})
}

func (p *pipe) write(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.gone {
		return
	}
	p.buf = append(p.buf, s...)
	p.signal()
}

func (p *pipe) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.signal()
	}
}

func (p *pipe) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// left reports whether the reader closed the pipe.
func (p *pipe) left() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gone
}

func (p *pipe) closeRead() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.gone {
		p.gone = true
		p.signal()
	}
}

func (p *pipe) read(b []byte) (int, error) {
	for {
		p.mu.Lock()
		switch {
		case p.gone:
			p.mu.Unlock()
			return 0, io.ErrClosedPipe
		case len(p.buf) > 0:
			n := copy(b, p.buf)
			p.buf = p.buf[n:]
			p.mu.Unlock()
			return n, nil
		case p.closed:
			p.mu.Unlock()
			return 0, io.EOF
		}
		ready := p.ready
		p.mu.Unlock()
		<-ready
	}
}
