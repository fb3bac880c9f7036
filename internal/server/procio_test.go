package server

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCgroupProcsCandidates(t *testing.T) {
	const id = "/docker/2a9c9ba041ec"
	v1 := "12:pids:" + id + "\n4:memory:" + id + "\n1:name=systemd:" + id + "\n0::" + id + "\n"
	got := cgroupProcsCandidates("/cg", []byte(v1))
	want := []string{"/cg/pids" + id + "/cgroup.procs", "/cg/memory" + id + "/cgroup.procs", "/cg" + id + "/cgroup.procs", "/cg/unified" + id + "/cgroup.procs"}
	if !slices.Equal(got, want) {
		t.Errorf("v1 (hybrid): %q, want %q", got, want)
	}
	got = cgroupProcsCandidates("/cg", []byte("0::/system.slice/docker-abc.scope\n"))
	want = []string{"/cg/system.slice/docker-abc.scope/cgroup.procs", "/cg/unified/system.slice/docker-abc.scope/cgroup.procs"}
	if !slices.Equal(got, want) {
		t.Errorf("v2: %q, want %q", got, want)
	}
	got = cgroupProcsCandidates("/cg", []byte("3:cpu,pids,memory:/a\n"))
	if want := []string{"/cg/pids/a/cgroup.procs"}; !slices.Equal(got, want) {
		t.Errorf("co-mounted controllers: %q, want %q", got, want)
	}
	for _, bad := range []string{"0::/../../etc\n", "0::relative\n", "garbage\n", "5:pids\n", ""} {
		if got := cgroupProcsCandidates("/cg", []byte(bad)); len(got) != 0 {
			t.Errorf("%q gave %q", bad, got)
		}
	}
}

func TestParseWriteBytes(t *testing.T) {
	io := "rchar: 48148\nwchar: 7754\nsyscr: 38\nsyscw: 7\nread_bytes: 0\nwrite_bytes: 5267456\ncancelled_write_bytes: 0\n"
	if v, err := parseWriteBytes([]byte(io)); err != nil || v != 5267456 {
		t.Fatalf("parseWriteBytes = %d, %v", v, err)
	}
	for _, bad := range []string{"", "write_bytes: x\n", "rchar: 1\n"} {
		if _, err := parseWriteBytes([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// onDiskDir is a temporary directory on a filesystem whose writes go
// through the page cache to a device (not tmpfs, where write_bytes does
// not move).
func onDiskDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary directory is on tmpfs: write_bytes does not count its writes")
	}
	return dir
}

// The kernel counts a buffered write in write_bytes at once (before any
// writeback), and a reaped child's writes in its parent's counter: the
// two assumptions of the disk monitor, checked on this kernel.
func TestWriteBytesOfRealProcesses(t *testing.T) {
	dir := onDiskDir(t)
	p := hostProc()
	before, err := p.writeBytes(os.Getpid())
	if err != nil {
		t.Skipf("/proc/self/io is not readable here: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "own"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	mid, err := p.writeBytes(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if mid-before < 1<<20 {
		t.Fatalf("1 MiB written without fsync: write_bytes grew by %d", mid-before)
	}
	cmd := exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(dir, "child"), "bs=65536", "count=32")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dd: %v %s", err, out)
	}
	after, err := p.writeBytes(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-mid < 2<<20 {
		t.Fatalf("a reaped child wrote 2 MiB: the parent's write_bytes grew by %d", after-mid)
	}
}

// cgroupProcsFile finds the cgroup of this process, and it lists this
// process.
func TestCgroupProcsFileListsTheProcess(t *testing.T) {
	p := hostProc()
	file, err := p.cgroupProcsFile(os.Getpid())
	if err != nil {
		t.Skipf("this process is in no cgroup of its own: %v", err)
	}
	pids, err := readProcs(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, os.Getpid()) {
		t.Fatalf("%s does not list this process (%d): %v", file, os.Getpid(), pids)
	}
}
