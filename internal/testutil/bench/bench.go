// Package bench runs a benchmark side by side with its reference.
package bench

import (
	"syscall"
	"testing"
	"time"
)

// Paired runs ours and its reference alternately (which goes first flips
// every iteration, so that neither always finds the caches warmer), times
// ours as the benchmark, and reports the reference's throughput (ref-MB/s),
// ours as a percentage of it (%-of-ref), and the process CPU seconds of
// each per run: on a shared machine the ratio of runs made side by side is
// steadier than either figure. Each run returns its untimed cleanup; the
// disk is synced after every run, so that no run pays for the writeback of
// the one before. total is the input bytes of one run.
func Paired(b *testing.B, total int64, ours, ref func() (cleanup func())) {
	b.SetBytes(total)
	var refTime, ourTime, refCPU, ourCPU time.Duration
	run := func(f func() func(), d, cpu *time.Duration) {
		start, startCPU := time.Now(), ProcessCPU()
		cleanup := f()
		*d += time.Since(start)
		*cpu += ProcessCPU() - startCPU
		b.StopTimer()
		if cleanup != nil {
			cleanup()
		}
		syscall.Sync()
	}
	n := 0
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		if n%2 == 0 {
			run(ref, &refTime, &refCPU)
			b.StartTimer()
			run(ours, &ourTime, &ourCPU)
		} else {
			b.StartTimer()
			run(ours, &ourTime, &ourCPU)
			run(ref, &refTime, &refCPU)
		}
		n++
		b.StartTimer()
	}
	mb := float64(total) * float64(n) / 1e6
	b.ReportMetric(mb/refTime.Seconds(), "ref-MB/s")
	b.ReportMetric(100*refTime.Seconds()/ourTime.Seconds(), "%-of-ref")
	b.ReportMetric(ourCPU.Seconds()/float64(n), "cpu-s/op")
	b.ReportMetric(refCPU.Seconds()/float64(n), "ref-cpu-s/op")
}

// ProcessCPU is the user and system CPU time used by this process so far
// (child processes such as tar are not counted).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
