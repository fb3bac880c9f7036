// Package hostinfo reads the host's facts (memory, load, CPU time, the
// filesystems of directories, addresses, the kernel and the distribution)
// from /proc, statfs and uname: the one place the faces (GET /api/system*)
// and the diagnostics report take them from.
package hostinfo

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Paths are the files the facts are read from: Proc() on the host, a
// test's own files in unit tests.
type Paths struct {
	Meminfo, Loadavg, Stat, Mounts, OSRelease string
}

// Proc is the host's own files.
func Proc() Paths {
	return Paths{
		Meminfo: "/proc/meminfo", Loadavg: "/proc/loadavg", Stat: "/proc/stat",
		Mounts: "/proc/self/mounts", OSRelease: "/etc/os-release",
	}
}

// Disk is one filesystem holding some of the directories asked about, with
// their tags; sizes in bytes.
type Disk struct {
	Device     string
	Mountpoint string
	TotalSpace uint64
	UsedSpace  uint64
	Tags       []string
}

// Meminfo reads /proc/meminfo in bytes: memory used is what is not
// available (MemTotal - MemAvailable), swap used is SwapTotal - SwapFree.
func Meminfo(path string) (memTotal, memUsed, swapTotal, swapUsed uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer f.Close()
	kb := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		if n, err := strconv.ParseUint(fields[0], 10, 64); err == nil {
			kb[name] = n * 1024
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, 0, 0, err
	}
	if kb["MemTotal"] == 0 {
		return 0, 0, 0, 0, fmt.Errorf("%s: no MemTotal", path)
	}
	avail, ok := kb["MemAvailable"]
	if !ok { // kernels before 3.14
		avail = kb["MemFree"] + kb["Buffers"] + kb["Cached"]
	}
	used := kb["MemTotal"] - min(avail, kb["MemTotal"])
	swapUsed = kb["SwapTotal"] - min(kb["SwapFree"], kb["SwapTotal"])
	return kb["MemTotal"], used, kb["SwapTotal"], swapUsed, nil
}

// Loadavg reads the three load averages of /proc/loadavg.
func Loadavg(path string) (l1, l5, l15 float64, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, 0, err
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return 0, 0, 0, fmt.Errorf("%s: %q", path, data)
	}
	var v [3]float64
	for i := range v {
		if v[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return 0, 0, 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	return v[0], v[1], v[2], nil
}

// cpuTimes is the aggregate line of /proc/stat: busy and total jiffies.
type cpuTimes struct{ busy, total uint64 }

func readCPUTimes(path string) (cpuTimes, error) {
	f, err := os.Open(path)
	if err != nil {
		return cpuTimes{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[0] != "cpu" {
			continue
		}
		var t cpuTimes
		for i, s := range fields[1:] {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("%s: %w", path, err)
			}
			// user nice system idle iowait irq softirq steal guest guest_nice:
			// guest time is already counted in user and nice.
			if i >= 8 {
				break
			}
			t.total += n
			if i != 3 && i != 4 { // idle, iowait
				t.busy += n
			}
		}
		return t, nil
	}
	return cpuTimes{}, fmt.Errorf("%s: no cpu line", path)
}

// CPUMeter turns successive /proc/stat samples into a busy percentage of
// all CPUs since the previous call (Pelican Wings: cpu.Percent(0, false)).
// The first call measures over a short window.
type CPUMeter struct {
	// Path is the /proc/stat file read.
	Path string

	mu   sync.Mutex
	last cpuTimes
	at   time.Time
}

// firstWindow is the measuring window of the first call, kept well under
// the panel's one-second timeout (Node::statistics).
const firstWindow = 200 * time.Millisecond

// Percent is the busy share of all CPUs, in percent, since the previous call.
func (m *CPUMeter) Percent(ctx context.Context) (float64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at.IsZero() {
		t, err := readCPUTimes(m.Path)
		if err != nil {
			return 0, err
		}
		m.last, m.at = t, time.Now()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(firstWindow):
		}
	}
	t, err := readCPUTimes(m.Path)
	if err != nil {
		return 0, err
	}
	prev := m.last
	m.last, m.at = t, time.Now()
	if t.total <= prev.total || t.busy < prev.busy {
		return 0, nil
	}
	p := float64(t.busy-prev.busy) / float64(t.total-prev.total) * 100
	return min(p, 100), nil
}

// Disks reports the filesystems holding the named directories, each once,
// with the names of the directories on it as tags (Pelican's "Root",
// "Logs", ...).
func Disks(dirs []TaggedDir, mountsPath string) []Disk {
	mounts := readMounts(mountsPath)
	var out []Disk
	byFS := map[[2]int32]int{}
	for _, d := range dirs {
		if d.Path == "" {
			continue
		}
		var st unix.Statfs_t
		if unix.Statfs(d.Path, &st) != nil {
			continue
		}
		if i, ok := byFS[st.Fsid.Val]; ok {
			out[i].Tags = append(out[i].Tags, d.Tag)
			continue
		}
		dev, mp := mounts.of(d.Path)
		bs := uint64(st.Bsize)
		byFS[st.Fsid.Val] = len(out)
		out = append(out, Disk{
			Device: dev, Mountpoint: mp,
			TotalSpace: st.Blocks * bs, UsedSpace: (st.Blocks - st.Bfree) * bs,
			Tags: []string{d.Tag},
		})
	}
	return out
}

// TaggedDir is a directory and the name shown for it.
type TaggedDir struct{ Tag, Path string }

type mountTable []struct{ device, point string }

func readMounts(path string) mountTable {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var t mountTable
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		t = append(t, struct{ device, point string }{fields[0], unescapeMount(fields[1])})
	}
	return t
}

// unescapeMount undoes the octal escapes of /proc/mounts (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// of returns the device and mount point of the last-mounted filesystem
// whose mount point holds path.
func (t mountTable) of(path string) (device, point string) {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	best := -1
	for i, m := range t {
		under := m.point == "/" || path == m.point || strings.HasPrefix(path, m.point+"/")
		if under && (best < 0 || len(m.point) >= len(t[best].point)) {
			best = i
		}
	}
	if best < 0 {
		return "", ""
	}
	return t[best].device, t[best].point
}

// IPs lists the addresses of the host's interfaces that other hosts
// can reach: loopback and link-local addresses are left out (as Pelican
// Wings' system.GetSystemIps).
func IPs() ([]string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() || n.IP.IsUnspecified() {
			continue
		}
		out = append(out, n.IP.String())
	}
	return out, nil
}

// OSPrettyName is the PRETTY_NAME (else NAME) of /etc/os-release.
func OSPrettyName(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var name string
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"'`)
		}
		if v, ok := strings.CutPrefix(line, "NAME="); ok {
			name = strings.Trim(v, `"'`)
		}
	}
	return name
}

// KernelRelease is the kernel's release (uname -r), "unknown" when uname fails.
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// Kernel is the kernel's name and release ("Linux 6.1.0-..."), as uname -sr.
func Kernel() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
}
