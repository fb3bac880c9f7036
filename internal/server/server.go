// Package server is the server domain: one Server per game server on this
// node (state machine, job slot, power lock, console, resource usage, install,
// sync, crash detection) and the Manager that holds them.
package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/quota"
	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/sandbox"
)

// State is a server's process state, as the wire shows it.
type State string

// The four process states.
const (
	Offline  State = "offline"
	Starting State = "starting"
	Running  State = "running"
	Stopping State = "stopping"
)

// Utilization is the resource usage record of the spec.
type Utilization struct {
	MemoryBytes      uint64  `json:"memory_bytes"`
	MemoryLimitBytes uint64  `json:"memory_limit_bytes"`
	CPUAbsolute      float64 `json:"cpu_absolute"`
	Network          struct {
		RxBytes uint64 `json:"rx_bytes"`
		TxBytes uint64 `json:"tx_bytes"`
	} `json:"network"`
	// DiskIO is the container's block I/O since it started (Pelican Wings'
	// disk_io; the panel derives throughput from deltas).
	DiskIO struct {
		ReadBytes  uint64 `json:"read_bytes"`
		WriteBytes uint64 `json:"write_bytes"`
	} `json:"disk_io"`
	Uptime    int64 `json:"uptime"`
	State     State `json:"state"`
	DiskBytes int64 `json:"disk_bytes"`
}

// Details is the record of GET /api/servers/:server.
type Details struct {
	State         State         `json:"state"`
	IsSuspended   bool          `json:"is_suspended"`
	Utilization   Utilization   `json:"utilization"`
	Configuration Configuration `json:"configuration"`
}

// Deps are the node-wide parts every server uses.
type Deps struct {
	Runtime runtime.Runtime
	Panel   *panel.Client
	Config  *config.Store
	Log     *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// StopTimeout is how long a stop may take before it escalates to a
	// kill; DefaultStopTimeout (10 minutes) when zero.
	StopTimeout time.Duration
	// Quotas sets kernel disk quotas (system.quotas); nil when off.
	Quotas *quota.Quotas
	// JobDrainWait is how long an exclusive job waits for the shared jobs
	// running when it begins (BeginJob); 2 seconds when zero.
	JobDrainWait time.Duration
	// Activity receives the node's own activity records (server:crashed);
	// nil when nobody listens.
	Activity ActivityRecorder
	// StatePush tells the panel of state changes (Pelican's container
	// status route); nil when nobody listens.
	StatePush StatePusher
}

// ActivityRecorder queues an activity record for the panel (activity.Queue).
type ActivityRecorder interface {
	Record(a panel.Activity)
}

// StatePusher receives every state change of the manager's servers, and
// hears when a server is gone (statepush.Pusher).
type StatePusher interface {
	Changed(uuid, from, to string)
	Forget(uuid string)
}

// Server is one game server.
type Server struct {
	deps *Deps
	log  *slog.Logger

	// ctx lives as long as the server is managed by this daemon; wg tracks
	// every goroutine the server starts, so Close can wait for them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	goMu   sync.Mutex // guards closed against wg.Add after close began
	closed bool

	mu          sync.RWMutex
	def         Definition
	done        []doneMatcher
	features    *FeatureMatcher // nil when the egg has none
	state       State
	util        Utilization
	startedAt   time.Time
	lastCrash   time.Time
	stateChange chan struct{} // closed and replaced on every state change
	run         *containerRun // the attached container, nil when none
	restoring   chan struct{} // closed when the re-attach at boot is over; nil when none (restore.go)
	deleted     bool

	// expectedExit is set when we stop or kill the process ourselves, so
	// that its exit is not taken for a crash.
	expectedExit atomic.Bool

	power    powerLock // one power action at a time; a kill always wins
	events   *events.Bus
	console  *ring
	throttle *throttle
	files    *sandbox.FS
	sessions sessions
	jobs     jobSlot // the one job slot: install, restore, transfers, backups, file jobs

	diskMu       sync.Mutex
	diskRefresh  time.Time
	diskInFlight bool

	// transitions orders state changes with what they publish and
	// record: two racing changes (a stop's stopping, the exit watcher's
	// offline) reach sockets and the states file in the order they were
	// made, so nobody is left seeing "stopping" after "offline".
	transitions sync.Mutex
	onState     func(uuid string, from, to State)
}

// containerRun is one attachment to the server's container.
type containerRun struct {
	ctx    context.Context // ends when the attachment ends
	stream runtime.Stream
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex // serialises writes to stdin
}

// end stops the goroutines of the attachment and closes the stream; the
// container is not touched.
func (r *containerRun) end() {
	r.cancel()
	_ = r.stream.Close()
}

// newServer builds a server; the manager calls it.
func newServer(parent context.Context, deps *Deps, def Definition, files *sandbox.FS, onState func(uuid string, from, to State)) *Server {
	ctx, cancel := context.WithCancel(parent)
	s := &Server{
		deps:        deps,
		log:         deps.Log.With("server", def.Config.UUID),
		ctx:         ctx,
		cancel:      cancel,
		def:         def,
		done:        compileDone(def.Process, deps.Log),
		features:    NewFeatureMatcher(def.Config.Egg.Features, def.Process.Startup.StripANSI),
		state:       Offline,
		stateChange: make(chan struct{}),
		events:      events.NewBus(),
		console:     newRing(func() int { return consoleLines(deps.Config.Get()) }),
		files:       files,
		onState:     onState,
	}
	s.util.MemoryLimitBytes = uint64(max(0, def.Config.Build.MemoryLimit)) * mib
	s.throttle = &throttle{
		now: deps.now,
		lines: func() (int, time.Duration) {
			t := deps.Config.Get().Throttles
			if !t.Enabled {
				return 0, 0
			}
			return t.Lines, time.Duration(t.LineResetInterval) * time.Millisecond
		},
	}
	return s
}

func (d *Deps) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// UUID is the server's identifier.
func (s *Server) UUID() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.def.Config.UUID
}

// Events is the server's event bus.
func (s *Server) Events() *events.Bus { return s.events }

// Files is the read-only view of the server's confined filesystem. A
// change to the files takes the job slot: BeginJob's Job.FS is the only
// writable door to them (ARCHITECTURE.md rule 4).
func (s *Server) Files() sandbox.ReadOnly { return s.files.ReadOnly() }

// DataDir is the host directory of the server's files (for the container mount).
func (s *Server) DataDir() string { return s.files.Root() }

// Definition returns the current configuration.
func (s *Server) Definition() Definition {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.def
}

// State returns the process state.
func (s *Server) State() State {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.state
}

// IsSuspended reports the backend's suspension flag. A restore is not a
// suspension: logins succeed during it, and what it forbids (changing the
// files, power) is refused naming it.
func (s *Server) IsSuspended() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.def.Config.Suspended
}

// IsInstalling, IsTransferring and IsRestoring report the flags of the spec,
// read from the job slot.
func (s *Server) IsInstalling() bool {
	j := s.RunningJob()
	return j == JobInstall || j == JobReinstall
}

func (s *Server) IsTransferring() bool {
	j := s.RunningJob()
	return j == JobTransferOut || j == JobTransferIn
}

func (s *Server) IsRestoring() bool { return s.RunningJob() == JobRestore }

// Utilization returns the current resource usage.
func (s *Server) Utilization() Utilization {
	s.maybeRefreshDisk()
	s.mu.RLock()
	defer s.mu.RUnlock()
	u := s.util
	u.State = s.state
	u.DiskBytes = s.files.Usage()
	if s.state != Offline && !s.startedAt.IsZero() {
		u.Uptime = s.deps.now().Sub(s.startedAt).Milliseconds()
	}
	return u
}

// Details returns the record served by the API.
func (s *Server) Details() Details {
	u := s.Utilization()
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Details{
		State: u.State,
		// The spec shows a restore as a suspension on the wire.
		IsSuspended:   s.def.Config.Suspended || s.IsRestoring(),
		Utilization:   u,
		Configuration: s.def.Config,
	}
}

// maybeRefreshDisk refreshes the cached disk usage in the background when it
// is older than system.disk_walk_interval (or system.disk_check_interval
// when longer); a read never waits for a walk. A running server is held to
// its limit by the disk monitor (diskmon.go), whose walks count here too.
func (s *Server) maybeRefreshDisk() {
	sys := s.deps.Config.Get().System
	interval := time.Duration(max(sys.DiskWalkInterval, sys.DiskCheckInterval)) * time.Second
	s.diskMu.Lock()
	defer s.diskMu.Unlock()
	if s.diskInFlight || (!s.diskRefresh.IsZero() && s.deps.now().Sub(s.diskRefresh) < interval) || s.ctx.Err() != nil {
		return
	}
	s.diskInFlight = true
	started := s.goServer(func() {
		_, err := s.files.RefreshUsage(s.ctx)
		if err != nil && s.ctx.Err() == nil {
			s.log.Warn("disk usage walk failed", "error", err)
		}
		s.diskMu.Lock()
		s.diskInFlight = false
		s.diskRefresh = s.deps.now()
		s.diskMu.Unlock()
	})
	if !started {
		s.diskInFlight = false
	}
}

// goServer runs fn in a goroutine owned by the server (waited for by
// close). Once close has begun, nothing is started and it reports false.
func (s *Server) goServer(fn func()) bool {
	s.goMu.Lock()
	defer s.goMu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Go(fn)
	return true
}

// setState moves the state machine; a transition not in the table is refused
// and logged. It publishes `status`, and on reaching offline resets the usage
// and publishes `stats`.
func (s *Server) setState(to State) bool {
	s.transitions.Lock()
	defer s.transitions.Unlock()
	s.mu.Lock()
	from := s.state
	if from == to {
		s.mu.Unlock()
		return true
	}
	if !CanTransition(from, to) {
		s.mu.Unlock()
		s.log.Warn("refused state transition", "from", from, "to", to)
		return false
	}
	s.state = to
	if to == Offline {
		limit := s.util.MemoryLimitBytes
		s.util = Utilization{MemoryLimitBytes: limit}
		s.startedAt = time.Time{}
	}
	close(s.stateChange)
	s.stateChange = make(chan struct{})
	s.mu.Unlock()

	s.log.Debug("state changed", "from", from, "to", to)
	s.events.Publish(events.New(events.Status, string(to)))
	if to == Offline {
		s.publishStats()
	}
	if s.onState != nil {
		s.onState(s.UUID(), from, to)
	}
	return true
}

// waitForState blocks until the state is want, ctx ends or d passes.
func (s *Server) waitForState(ctx context.Context, want State, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		s.mu.RLock()
		st, ch := s.state, s.stateChange
		s.mu.RUnlock()
		if st == want {
			return true
		}
		select {
		case <-ch:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func (s *Server) publishStats() {
	b, err := json.Marshal(s.Utilization())
	if err != nil {
		return
	}
	s.events.Publish(events.New(events.Stats, string(b)))
}

// daemonMessage writes a line of the daemon's own into the console.
func (s *Server) daemonMessage(text string) {
	line := DaemonLine(s.deps.Config.Get().AppName, text)
	s.console.add(line)
	e := events.New(events.ConsoleOutput, line)
	e.Kept = true // a lagging socket skips the game's lines, not these
	s.events.Publish(e)
}

// DaemonLine is a console line of the daemon's own: text after a
// "[<app name> Daemon]:" prefix, in the colours Wings uses.
func DaemonLine(appName, text string) string {
	return fmt.Sprintf("\x1b[33m\x1b[1m[%s Daemon]:\x1b[39m %s\x1b[0m", appName, text)
}

// Publish sends an event to the server's subscribers (backups, transfers).
func (s *Server) Publish(e events.Event) { s.events.Publish(e) }

// ConsoleLines returns up to n of the newest console lines.
func (s *Server) ConsoleLines(n int) []string { return s.console.last(n) }

// close stops every goroutine of the server without touching its container,
// and closes its files.
func (s *Server) close() {
	defer s.files.Close()
	s.stopRun()
}

// stopRun stops every goroutine of the server without touching its
// container or its files.
func (s *Server) stopRun() {
	s.goMu.Lock()
	s.closed = true
	s.goMu.Unlock()
	s.cancel()
	s.mu.Lock()
	run := s.run
	s.mu.Unlock()
	if run != nil {
		run.end()
	}
	s.wg.Wait()
}
