package server

import (
	"context"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/config"
)

// DiskLimitMessage is the console line of a server stopped because it is
// past its disk limit: the words of Wings and Pelican Wings, which the
// panels' users know.
const DiskLimitMessage = "Server is exceeding the assigned disk space limit, stopping process now."

// The disk monitor holds running servers to their disk limit (bytes, every
// entry counted as at least 4 KiB) and to system.disk_entry_limit, against
// the game's own writes, which do not go through the sandbox (issue 32).
// Kernel project quotas (system.quotas) make the filesystem refuse those
// writes; without them, this is the enforcement.
//
// Every system.disk_check_interval seconds, for each running server, it
// reads cheap figures and walks the tree only when they say it may be
// over:
//
//   - the bytes the container's processes wrote since the last walk, from
//     the kernel's per-task I/O accounting (procio.go): an upper bound of
//     what their writes can have added, seen as soon as a page is dirtied;
//   - the number of entries, read from the directory records alone
//     (sandbox.FS.CountEntries), only when the count of used inodes of the
//     server directory's filesystem moved since the server's last count
//     (one statfs), and on every check on a filesystem that reports none;
//   - the sandbox's usage (the last walk and the daemon's own writes since:
//     SFTP, file manager, jobs).
//
// The estimate (usage + bytes written + 4 KiB per new entry) crossing the
// limit triggers a full walk (sandbox.FS.RefreshUsage); the server is
// stopped when the walk finds it over, or when the entry count passes the
// entry limit. What the counters cannot see (space allocated by fallocate,
// writes of a process that exited unreaped between two checks) is bounded
// by a full walk every system.disk_walk_interval seconds (spread over the
// checks: see tick).
type diskMonitor struct {
	m    *Manager
	proc procPaths
	recs map[string]*diskRec // by server UUID; only the monitor's goroutine touches it
}

// diskRec is what the monitor follows of one run of one server.
type diskRec struct {
	started     time.Time // the container's start: a new run starts afresh
	pid         int       // the container's first process; 0 until known
	procs       string    // its cgroup.procs file; "" until found
	tally       ioTally
	written     int64     // bytes written by the container since the last walk
	walked      time.Time // the last full walk
	entries     int64     // the last entry count; -1 before the first
	walkEntries int64     // the entry count at the last walk
	fsInodes    uint64    // used inodes of the filesystem at the last count
	stopping    bool      // the stop was ordered: nothing more to do for this run
}

// StartDiskMonitor starts the disk monitor of the node's running servers;
// Close stops it and waits for it.
func (m *Manager) StartDiskMonitor() {
	ctx, cancel := context.WithCancel(m.ctx)
	done := make(chan struct{})
	d := &diskMonitor{m: m, proc: hostProc(), recs: map[string]*diskRec{}}
	m.monMu.Lock()
	defer m.monMu.Unlock()
	if m.monStop != nil {
		cancel()
		return
	}
	m.monStop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		d.run(ctx)
	}()
}

// stopDiskMonitor stops the monitor and waits for it (nothing when it was
// not started).
func (m *Manager) stopDiskMonitor() {
	m.monMu.Lock()
	stop := m.monStop
	m.monMu.Unlock()
	if stop != nil {
		stop()
	}
}

// run checks every system.disk_check_interval seconds (read at each check)
// until ctx ends. A check that takes longer than the interval is followed
// by the next at once.
func (d *diskMonitor) run(ctx context.Context) {
	next := time.Now()
	for {
		interval := time.Duration(d.m.deps.Config.Get().System.DiskCheckInterval) * time.Second
		next = next.Add(max(interval, time.Second))
		if now := time.Now(); next.Before(now) {
			next = now
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		d.tick(ctx)
	}
}

// tick checks every running server, two at a time, in two passes: first
// the cheap figures of every server, with a full walk at once for each
// whose estimate passed its limit; then the backstop walks that are due,
// the longest-unwalked first and at most a share per check (enough to walk
// every server once per system.disk_walk_interval), so that a node's walks
// are spread over the interval rather than all made in one check (at boot
// they all are due) and never hold up the next cheap check for long.
// Servers that no longer run are forgotten.
func (d *diskMonitor) tick(ctx context.Context) {
	cfg := d.m.deps.Config.Get().System
	live := map[string]bool{}
	type job struct {
		s   *Server
		rec *diskRec
	}
	var jobs []job
	for _, s := range d.m.All() {
		started, ok := s.runningSince()
		if !ok {
			continue
		}
		live[s.UUID()] = true
		rec := d.recs[s.UUID()]
		if rec == nil || !rec.started.Equal(started) {
			rec = &diskRec{started: started, entries: -1, walked: s.lastDiskWalk()}
			d.recs[s.UUID()] = rec
		}
		if !rec.stopping {
			jobs = append(jobs, job{s, rec})
		}
	}
	for id := range d.recs {
		if !live[id] {
			delete(d.recs, id)
		}
	}
	var g errgroup.Group
	g.SetLimit(2)
	due := make([]bool, len(jobs))
	for i, j := range jobs {
		g.Go(func() error {
			due[i] = d.check(ctx, j.s, j.rec, cfg)
			return nil
		})
	}
	_ = g.Wait()
	var backstop []job
	for i, j := range jobs {
		if due[i] {
			backstop = append(backstop, j)
		}
	}
	sort.Slice(backstop, func(a, b int) bool { return backstop[a].rec.walked.Before(backstop[b].rec.walked) })
	walkEvery := max(cfg.DiskWalkInterval, cfg.DiskCheckInterval)
	share := (len(jobs)*cfg.DiskCheckInterval + walkEvery - 1) / walkEvery
	for _, j := range backstop[:min(len(backstop), share+1)] {
		g.Go(func() error {
			d.walk(ctx, j.s, j.rec, cfg)
			return nil
		})
	}
	_ = g.Wait()
}

// check is one check of one running server: it reads the cheap figures,
// stops the server past the entry limit, walks it at once when the
// estimate passed the disk limit, and reports whether a backstop walk is
// due (none for system.disk_walk_interval).
func (d *diskMonitor) check(ctx context.Context, s *Server, rec *diskRec, cfg config.System) (walkDue bool) {
	rec.written += int64(min(d.readWritten(ctx, s, rec), 1<<62))
	d.countEntries(ctx, s, rec)
	f := diskFigures{
		limit: s.files.DiskLimit(), entryLimit: cfg.DiskEntryLimit,
		usage: s.files.Usage(), written: rec.written,
		entries: rec.entries, walkEntries: rec.walkEntries,
	}
	if f.tooManyEntries() {
		rec.stopping = true
		s.stopForDisk(cfg, fmt.Sprintf("%d entries, more than system.disk_entry_limit (%d)", f.entries, f.entryLimit))
		return false
	}
	if f.needsWalk() {
		d.walk(ctx, s, rec, cfg)
		return false
	}
	walkEvery := time.Duration(max(cfg.DiskWalkInterval, cfg.DiskCheckInterval)) * time.Second
	return rec.walked.IsZero() || s.deps.now().Sub(rec.walked) >= walkEvery
}

// walk counts the server's tree in full and stops it when it is over its
// disk limit.
func (d *diskMonitor) walk(ctx context.Context, s *Server, rec *diskRec, cfg config.System) {
	now := s.deps.now()
	limit := s.files.DiskLimit()
	used, err := s.files.RefreshUsage(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		// The usage stored is then at least the limit plus one byte.
		s.log.Warn("disk usage walk failed", "error", err)
	}
	rec.walked, rec.written, rec.walkEntries = now, 0, max(rec.entries, 0)
	s.markDiskWalked(now)
	if overLimit(used, limit) {
		rec.stopping = true
		s.stopForDisk(cfg, fmt.Sprintf("%d bytes used, more than the limit of %d", used, limit))
	}
}

// readWritten returns the bytes the container's processes wrote since the
// previous read (0 when they cannot be read: the full walk is then the
// only bound).
func (d *diskMonitor) readWritten(ctx context.Context, s *Server, rec *diskRec) uint64 {
	if rec.procs == "" {
		if rec.pid == 0 {
			st, err := s.deps.Runtime.Inspect(ctx, s.UUID())
			if err != nil || !st.Running || st.Pid <= 0 {
				return 0
			}
			rec.pid = st.Pid
		}
		file, err := d.proc.cgroupProcsFile(rec.pid)
		if err != nil {
			s.log.Debug("the container's processes cannot be found", "error", err)
			rec.pid = 0
			return 0
		}
		rec.procs = file
	}
	pids, err := readProcs(rec.procs, nil)
	if err != nil {
		// The cgroup is gone (the container exited or was re-created).
		rec.procs, rec.pid = "", 0
		return 0
	}
	now := make(map[int]uint64, len(pids))
	for _, pid := range pids {
		if v, err := d.proc.writeBytes(pid); err == nil {
			now[pid] = v
		}
	}
	return rec.tally.add(now)
}

// countEntries counts the server's entries when the filesystem's count of
// used inodes moved since the last count (or the filesystem reports none).
func (d *diskMonitor) countEntries(ctx context.Context, s *Server, rec *diskRec) {
	used, known := usedInodes(s.files.Root())
	if known && rec.entries >= 0 && used == rec.fsInodes {
		return
	}
	n, err := s.files.CountEntries(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("counting the server's entries failed", "error", err)
		}
		return
	}
	rec.entries, rec.fsInodes = n, used
}

// usedInodes returns the number of inodes in use on the filesystem of dir;
// known is false when the filesystem does not report them (btrfs).
func usedInodes(dir string) (used uint64, known bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Files == 0 {
		return 0, false
	}
	return st.Files - st.Ffree, true
}

// stopForDisk says on the console that the server is past its disk limit
// and stops it in the background: its configured stop (the game may save),
// killed if it has not exited after the check interval (at least 5, at
// most 60 seconds: a game that ignores the stop is not given long to
// write). Wings and Pelican Wings stop the same way, with a minute before
// the kill.
func (s *Server) stopForDisk(cfg config.System, why string) {
	s.log.Warn("stopping the server: it is past its disk limit", "reason", why)
	s.daemonMessage(DiskLimitMessage)
	bound := min(max(time.Duration(cfg.DiskCheckInterval)*time.Second, 5*time.Second), time.Minute)
	s.goServer(func() {
		ctx, release, err := s.power.acquire(s.ctx, bound)
		if err != nil {
			// Another power action holds the lock: a kill always wins.
			if err := s.Kill(s.ctx); err != nil && s.ctx.Err() == nil {
				s.log.Warn("killing the server past its disk limit failed", "error", err)
			}
			return
		}
		defer release()
		if err := s.stopWithin(ctx, bound); err != nil && s.ctx.Err() == nil {
			s.log.Warn("stopping the server past its disk limit failed", "error", err)
		}
	})
}

// runningSince returns when the server's container started, while the
// server is starting or running.
func (s *Server) runningSince() (time.Time, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.startedAt, s.state.IsRunning() && !s.startedAt.IsZero()
}

// lastDiskWalk returns when the server's tree was last walked in full by
// the periodic refresh or the monitor (zero when never).
func (s *Server) lastDiskWalk() time.Time {
	s.diskMu.Lock()
	defer s.diskMu.Unlock()
	return s.diskRefresh
}

// markDiskWalked records a full walk made by the monitor, so that the
// periodic refresh of a stats read does not walk again before
// system.disk_walk_interval.
func (s *Server) markDiskWalked(at time.Time) {
	s.diskMu.Lock()
	defer s.diskMu.Unlock()
	s.diskRefresh = at
}
