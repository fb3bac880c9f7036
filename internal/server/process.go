package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/consoletext"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/runtime"
)

// doneMatcher recognises the console line that means "started".
type doneMatcher struct {
	substr    string
	re        *regexp.Regexp
	stripANSI bool
}

func compileDone(p ProcessConfiguration, log *slog.Logger) []doneMatcher {
	var out []doneMatcher
	for _, d := range p.Startup.Done {
		if strings.HasPrefix(d, "regex:") && len(d) > len("regex:") {
			re, err := regexp.Compile(strings.TrimPrefix(d, "regex:"))
			if err != nil {
				log.Warn("invalid startup.done regular expression; ignored", "pattern", d, "error", err)
				continue
			}
			out = append(out, doneMatcher{re: re, stripANSI: p.Startup.StripANSI})
			continue
		}
		if d != "" {
			out = append(out, doneMatcher{substr: d, stripANSI: p.Startup.StripANSI})
		}
	}
	return out
}

func (m doneMatcher) match(line string) bool {
	if m.stripANSI {
		line = consoletext.StripANSI(line)
	}
	if m.re != nil {
		return m.re.MatchString(line)
	}
	return strings.Contains(line, m.substr)
}

// attach connects to the container and starts the goroutines that read its
// output and its resource usage for as long as it runs.
func (s *Server) attach(ctx context.Context) error {
	// The stream lives as long as the container runs, not as long as the
	// caller (a power action) does: its context derives from the server's.
	runCtx, cancel := context.WithCancel(s.ctx)
	stop := context.AfterFunc(ctx, cancel) // until attached, the caller may give up
	stream, err := s.deps.Runtime.Attach(runCtx, s.UUID())
	if !stop() && err == nil {
		_ = stream.Close()
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return err
	}
	run := &containerRun{ctx: runCtx, stream: stream, cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	old := s.run
	s.run = run
	s.mu.Unlock()
	if old != nil {
		old.end()
	}
	if !s.goServer(func() {
		defer close(run.done)
		var out outputBatch
		err := consoletext.ReadLinesFlush(stream, MaxLineBytes, func(line string) { s.onOutput(line, &out) },
			func() { s.endOfRead(&out) })
		if err != nil && runCtx.Err() == nil {
			s.log.Debug("console stream ended with an error", "error", err)
		}
		s.onStreamEnd(runCtx, run)
	}) {
		s.detach()
		return ErrDeleted
	}
	return nil
}

// watchStats follows the resource usage of the attached container. It must
// be called once the container runs: the engine ends the stats stream of a
// container that is not running.
func (s *Server) watchStats() {
	s.mu.RLock()
	run := s.run
	s.mu.RUnlock()
	if run != nil {
		s.goServer(func() { s.pollStats(run.ctx) })
	}
}

// detach drops the current attachment without touching the container.
func (s *Server) detach() {
	s.mu.Lock()
	run := s.run
	s.run = nil
	s.mu.Unlock()
	if run != nil {
		run.end()
	}
}

// onStreamEnd runs when the container's output ends: the process exited (or
// we detached). The exit is settled here and crash detection may follow.
func (s *Server) onStreamEnd(runCtx context.Context, run *containerRun) {
	run.cancel()
	s.mu.Lock()
	current := s.run == run
	if current {
		s.run = nil
	}
	s.mu.Unlock()
	if !current || s.ctx.Err() != nil {
		return // detached on purpose, or the daemon is shutting down: the container lives on
	}
	// The stream can also end when the engine restarts; wait for the real exit.
	st, err := s.deps.Runtime.Wait(s.ctx, s.UUID())
	if s.ctx.Err() != nil {
		return
	}
	if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		s.log.Warn("waiting for the container failed", "error", err)
	}
	if errors.Is(err, runtime.ErrNotFound) {
		st = runtime.State{ExitCode: 1}
	}
	prev := s.State()
	s.setState(Offline)
	if (prev == Running || prev == Starting) && !s.expectedExit.Load() {
		s.goServer(func() { s.handleCrash(st) })
	}
}

// outputBatch gathers the events of the console lines of one read of the
// container's output, published together (events.Bus.PublishAll): a
// socket's writer then wakes once for the burst instead of once per line.
type outputBatch struct {
	events []events.Event
	// held is the last line of the read so far when the throttle dropped
	// it: it passes at the end of the read (endOfRead), so that the
	// newest line of a flood (a command's answer after it) is never lost.
	held    string
	holding bool
}

func (b *outputBatch) add(e events.Event) { b.events = append(b.events, e) }

// publish hands the gathered events on, in order, and empties the batch.
func (b *outputBatch) publish(bus *events.Bus) {
	if len(b.events) == 0 {
		return
	}
	bus.PublishAll(b.events)
	clear(b.events)
	b.events = b.events[:0]
}

// endOfRead ends the lines of one read of the container's output: the
// last of them passes even when the throttle dropped it (one line more
// per read, at most), and the batch is published.
func (s *Server) endOfRead(out *outputBatch) {
	if out.holding {
		s.console.add(out.held)
		out.add(events.New(events.ConsoleOutput, out.held))
		out.held, out.holding = "", false
	}
	out.publish(s.events)
}

// onOutput handles one console line of the running process; its events
// join out, which is published before anything the line itself causes (a
// state change, the throttle's notice), so that the order holds.
func (s *Server) onOutput(line string, out *outputBatch) {
	s.mu.RLock()
	starting := s.state == Starting
	running := s.state.IsRunning()
	done := s.done
	features := s.features
	s.mu.RUnlock()
	if starting {
		for _, m := range done {
			if m.match(line) {
				out.publish(s.events)
				s.setState(Running)
				break
			}
		}
	}
	ok, firstDrop := s.throttle.allow()
	if !ok {
		if firstDrop {
			out.publish(s.events)
			s.daemonMessage("Server is outputting console data too quickly -- throttling...")
		}
		out.held, out.holding = line, true
		return
	}
	out.holding = false
	s.console.add(line)
	out.add(events.New(events.ConsoleOutput, line))
	// After the throttle: a flood's dropped lines cost nothing more. Only
	// while the process starts or runs, as in Pelican Wings.
	if features != nil && running {
		if m, ok := features.Match(line); ok {
			out.add(events.New(events.FeatureMatch, m.JSON()))
		}
	}
}

// SendCommand writes a line to the process's standard input.
func (s *Server) SendCommand(line string) error {
	s.waitRestored() // a command sent right after boot waits for the re-attach
	s.mu.RLock()
	run := s.run
	st := s.state
	s.mu.RUnlock()
	if run == nil || !st.IsRunning() && st != Stopping {
		return ErrNotRunning
	}
	cmd := sanitizeCommand(line)
	// The stop command typed by a user is a stop, not a crash to restart from.
	isStop := s.isStopCommand(cmd)
	if isStop {
		s.expectedExit.Store(true)
	}
	run.mu.Lock()
	_, err := run.stream.Write([]byte(cmd + "\n"))
	run.mu.Unlock()
	if err != nil {
		return fmt.Errorf("writing to the server's console: %w", err)
	}
	if isStop && s.State().IsRunning() {
		s.setState(Stopping)
	}
	return nil
}

// isStopCommand reports whether cmd is the server's stop command.
func (s *Server) isStopCommand(cmd string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	stop := s.def.Process.Stop
	return stop.Type == "command" && stop.Value != "" && strings.TrimSpace(cmd) == strings.TrimSpace(stop.Value)
}

// pollStats follows the runtime's resource samples while the container runs.
func (s *Server) pollStats(ctx context.Context) {
	ch, err := s.deps.Runtime.Stats(ctx, s.UUID())
	if err != nil {
		if ctx.Err() == nil {
			s.log.Debug("stats stream unavailable", "error", err)
		}
		return
	}
	for sample := range ch {
		s.mu.Lock()
		if s.state == Offline {
			s.mu.Unlock()
			continue
		}
		s.util.MemoryBytes = sample.MemoryBytes
		if sample.MemoryLimitBytes > 0 {
			s.util.MemoryLimitBytes = sample.MemoryLimitBytes
		}
		s.util.CPUAbsolute = math.Round(sample.CPUAbsolute*1000) / 1000
		s.util.Network.RxBytes = sample.RxBytes
		s.util.Network.TxBytes = sample.TxBytes
		s.util.DiskIO.ReadBytes = sample.DiskReadBytes
		s.util.DiskIO.WriteBytes = sample.DiskWriteBytes
		s.mu.Unlock()
		s.publishSample()
	}
}

// publishSample publishes the resources in order with the state changes
// (transitions): a sample read while the server was starting is not
// published after the status that says it runs (seen under load, the
// panel's state going back to starting for a second).
func (s *Server) publishSample() {
	s.transitions.Lock()
	defer s.transitions.Unlock()
	s.publishStats()
}

// handleCrash decides whether to restart after the process exited on its own.
func (s *Server) handleCrash(st runtime.State) {
	if s.State() != Offline {
		return // started again in the meantime
	}
	cfg := s.deps.Config.Get().System.CrashDetection
	def := s.Definition()
	if !def.Config.CrashDetectionEnabled || !cfg.Enabled {
		s.daemonMessage("Aborting automatic restart, crash detection is disabled for this instance.")
		return
	}
	if st.ExitCode == 0 && !st.OOMKilled && !cfg.DetectCleanExitAsCrash {
		return
	}
	s.recordCrash(st) // before the daemon's own lines reach the console
	s.daemonMessage("---------- Detected server process in a crashed state! ----------")
	s.daemonMessage(fmt.Sprintf("Exit code: %d", st.ExitCode))
	s.daemonMessage(fmt.Sprintf("Out of memory: %t", st.OOMKilled))
	now := s.deps.now()
	s.mu.Lock()
	last := s.lastCrash
	timeout := time.Duration(cfg.Timeout) * time.Second
	if timeout > 0 && !last.IsZero() && now.Sub(last) < timeout {
		s.mu.Unlock()
		s.daemonMessage(fmt.Sprintf("Aborting automatic restart, last crash occurred less than %d seconds ago.", cfg.Timeout))
		return
	}
	s.lastCrash = now
	s.mu.Unlock()
	if err := s.PowerAsync(PowerStart, 0); err != nil {
		s.log.Warn("automatic restart after a crash not possible", "error", err)
	}
}

// recordCrash queues the server:crashed activity with the exit code, whether
// the kernel killed it for memory, and the last console lines (Pelican Wings'
// server/crash.go; the panel's activity log says "Server crashed"). No user
// caused it: the record has none, and the node's loopback address.
func (s *Server) recordCrash(st runtime.State) {
	if s.deps.Activity == nil {
		return
	}
	lines := s.ConsoleLines(s.deps.Config.Get().System.CrashActivityLines)
	if lines == nil {
		lines = []string{}
	}
	s.deps.Activity.Record(panel.Activity{
		Server: s.UUID(),
		Event:  "server:crashed",
		Metadata: map[string]any{
			"exit_code": st.ExitCode,
			"oomkilled": st.OOMKilled,
			"logs":      lines,
		},
		IP:        "127.0.0.1",
		Timestamp: s.deps.now().UTC(),
	})
}

// sanitizeCommand removes control characters from a console command: a
// newline would smuggle a second command, and Docker's detach sequence
// (ctrl-p ctrl-q) would cut the console off.
func sanitizeCommand(line string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return -1
		}
		return r
	}, line)
}
