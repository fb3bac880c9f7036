package server

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The kernel's per-task I/O accounting, read for the disk monitor
// (diskmon.go). /proc/<pid>/io's write_bytes is what the process caused to
// be written to storage, counted when it dirties a page (so a buffered
// write shows at once, before writeback), and, for the thread group, with
// its dead threads and its reaped children added (their counters move to
// the parent when it waits for them). A process that exits and is not
// reaped yet shows nowhere: the monitor keeps what it last read of each
// process, and its full walk is the bound for what it never saw.

// procPaths are the roots of /proc and of the cgroup filesystems (tests
// point them elsewhere only to read fixtures; the daemon uses the real
// ones).
type procPaths struct {
	proc, cgroup string
}

// hostProc is the real /proc and cgroup filesystem.
func hostProc() procPaths { return procPaths{proc: "/proc", cgroup: "/sys/fs/cgroup"} }

// cgroupProcsCandidates returns the cgroup.procs files that may list the
// processes of the cgroup described by data (the content of
// /proc/<pid>/cgroup), best first: cgroup v1's pids, then memory
// hierarchy, then the v2 (unified) hierarchy mounted at the root or, in
// the hybrid layout, at unified/.
func cgroupProcsCandidates(root string, data []byte) []string {
	var v1pids, v1mem, v2 string
	for line := range strings.SplitSeq(string(data), "\n") {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(path, "/") || slicesContainsDotDot(path) {
			continue
		}
		switch {
		case id == "0" && ctrls == "":
			v2 = path
		case hasController(ctrls, "pids"):
			v1pids = path
		case hasController(ctrls, "memory"):
			v1mem = path
		}
	}
	var out []string
	if v1pids != "" {
		out = append(out, filepath.Join(root, "pids", v1pids, "cgroup.procs"))
	}
	if v1mem != "" {
		out = append(out, filepath.Join(root, "memory", v1mem, "cgroup.procs"))
	}
	if v2 != "" {
		out = append(out, filepath.Join(root, v2, "cgroup.procs"), filepath.Join(root, "unified", v2, "cgroup.procs"))
	}
	return out
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

func slicesContainsDotDot(path string) bool {
	for c := range strings.SplitSeq(path, "/") {
		if c == ".." {
			return true
		}
	}
	return false
}

// cgroupProcsFile returns the cgroup.procs file listing the processes of
// the cgroup the process pid is in (the container's, for its first
// process). The root cgroup is refused: that would be every process of
// the host.
func (p procPaths) cgroupProcsFile(pid int) (string, error) {
	data, err := os.ReadFile(filepath.Join(p.proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", err
	}
	for _, c := range cgroupProcsCandidates(p.cgroup, data) {
		if filepath.Dir(c) == p.cgroup || filepath.Dir(c) == filepath.Join(p.cgroup, "unified") {
			continue
		}
		if _, err := os.Stat(c); err == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("no cgroup.procs found for process %d", pid)
}

// readProcs returns the process ids listed in a cgroup.procs file.
func readProcs(file string, into []int) ([]int, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return into, err
	}
	for f := range bytes.FieldsSeq(data) {
		if pid, err := strconv.Atoi(string(f)); err == nil && pid > 0 {
			into = append(into, pid)
		}
	}
	return into, nil
}

var errNoWriteBytes = errors.New("no write_bytes line")

// parseWriteBytes returns the write_bytes figure of a /proc/<pid>/io text.
func parseWriteBytes(data []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("write_bytes:")); ok {
			return strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, errNoWriteBytes
}

// writeBytes reads the write_bytes of the process pid.
func (p procPaths) writeBytes(pid int) (uint64, error) {
	data, err := os.ReadFile(filepath.Join(p.proc, strconv.Itoa(pid), "io"))
	if err != nil {
		return 0, err
	}
	return parseWriteBytes(data)
}
