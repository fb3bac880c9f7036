package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/testutil/wait"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func quietEnv(b *testing.B, mutate func(*config.Config), servers ...devpanel.Server) *dockerEnv {
	e := newDockerEnv(b, envOptions{mutate: mutate}, servers...)
	// The daemon's log would dominate the figures.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e.m.deps.Log = quiet
	for _, s := range e.m.All() {
		s.log = quiet
	}
	return e
}

// Console throughput: lines per second delivered to a subscriber from a
// flooding container (throttle off), and the daemon's CPU per 10k lines.
func BenchmarkConsoleThroughput(b *testing.B) {
	benchConsoleThroughput(b, gameDef(nil))
}

// The same with Pelican egg features to match on every line (none match).
func BenchmarkConsoleThroughputFeatures(b *testing.B) {
	def := gameDef(nil)
	def.Settings["egg"] = map[string]any{"features": map[string]any{
		"eula":         []string{"you need to agree to the eula in order to run the server"},
		"java_version": []string{"minecraft 1.17 requires running the server with java 16 or above", "unsupported class file major version"},
		"pid_limit":    []string{"pthread_create failed", "failed to create thread", "unable to create native thread"},
	}}
	benchConsoleThroughput(b, def)
}

func benchConsoleThroughput(b *testing.B, def devpanel.Server) {
	e := quietEnv(b, func(c *config.Config) { c.Throttles.Enabled = false }, def)
	s := e.server(def.UUID)
	if err := s.Power(context.Background(), PowerStart, time.Second); err != nil {
		b.Fatal(err)
	}
	waitState(b, s, Running)
	const lines = 200_000
	var total time.Duration
	var cpu time.Duration
	delivered := 0
	b.ResetTimer()
	for i := range b.N {
		sub := s.Events().Subscribe(1 << 16)
		last := fmt.Sprintf("flood line %d", lines)
		c0, t0 := cpuTime(), time.Now()
		if err := s.SendCommand(fmt.Sprintf("flood %d", lines)); err != nil {
			b.Fatal(err)
		}
		got := 0
	loop:
		for {
			select {
			case ev := <-sub.C:
				if ev.Name == events.ConsoleOutput && strings.HasPrefix(ev.Args[0], "flood line") {
					got++
					if ev.Args[0] == last {
						break loop
					}
				}
			case <-time.After(60 * time.Second):
				b.Fatalf("round %d: only %d lines", i, got)
			}
		}
		total += time.Since(t0)
		cpu += cpuTime() - c0
		delivered += got
		sub.Close()
	}
	b.StopTimer()
	b.ReportMetric(float64(delivered)/total.Seconds(), "lines/s")
	b.ReportMetric(float64(cpu.Milliseconds())/(float64(delivered)/10_000), "cpu-ms/10k-lines")
	_ = s.Kill(context.Background())
}

// Start-to-running latency of the test server: from the start request to
// the done line being matched (container re-created every time).
func BenchmarkStartToRunning(b *testing.B) {
	def := gameDef(nil)
	e := quietEnv(b, nil, def)
	s := e.server(def.UUID)
	b.ResetTimer()
	for range b.N {
		if err := s.PowerAsync(PowerStart, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		waitState(b, s, Running)
		b.StopTimer()
		if err := s.Kill(context.Background()); err != nil {
			b.Fatal(err)
		}
		waitState(b, s, Offline)
		b.StartTimer()
	}
}

// Memory of the daemon with 200 servers loaded and 20 of them running.
func BenchmarkMemory200Loaded20Running(b *testing.B) {
	defs := make([]devpanel.Server, 200)
	for i := range defs {
		defs[i] = gameDef(nil)
	}
	var before goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	e := quietEnv(b, nil, defs...)
	all := e.m.All()
	for _, s := range all[:20] {
		if err := s.PowerAsync(PowerStart, 30*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	for _, s := range all[:20] {
		waitState(b, s, Running)
	}
	for _, s := range all[:20] { // the stats streams deliver before measuring
		wait.For(b, 30*time.Second, func() bool { return s.Details().Utilization.MemoryBytes > 0 }, "stats of %s", s.UUID())
	}
	b.ResetTimer()
	var after goruntime.MemStats
	for range b.N {
		for _, s := range all {
			_ = s.Details()
		}
	}
	b.StopTimer()
	goruntime.GC()
	goruntime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(after.Sys)/(1<<20), "sys-MiB")
	b.ReportMetric(float64(goruntime.NumGoroutine()), "goroutines")
	for _, s := range all[:20] {
		_ = s.Kill(context.Background())
	}
}
