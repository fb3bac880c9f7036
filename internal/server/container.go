package server

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/runtime"
)

const mib = 1024 * 1024

// EnvironmentVariables returns what a server's container sees: TZ, STARTUP,
// SERVER_MEMORY, SERVER_IP, SERVER_PORT, then the backend's variables
// (upper-cased, sorted, never overriding the five above).
func EnvironmentVariables(c Configuration, timezone string) []string {
	env := []string{
		"TZ=" + ServerTimezone(c.Environment, timezone),
		"STARTUP=" + c.Invocation,
		"SERVER_MEMORY=" + strconv.FormatInt(c.Build.MemoryLimit, 10),
		"SERVER_IP=" + c.Allocations.Default.IP,
		"SERVER_PORT=" + strconv.Itoa(c.Allocations.Default.Port),
	}
	reserved := map[string]bool{"TZ": true, "STARTUP": true, "SERVER_MEMORY": true, "SERVER_IP": true, "SERVER_PORT": true}
	keys := make([]string, 0, len(c.Environment))
	for k := range c.Environment {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := strings.ToUpper(k)
		if reserved[name] || name == "" || strings.ContainsAny(name, "=\x00") {
			continue
		}
		env = append(env, name+"="+envValue(c.Environment[k]))
	}
	return env
}

// ServerTimezone is the container's TZ: the server's SERVER_TIMEZONE
// variable when it names a known zone, else the node's system.timezone (as
// Pelican Wings does it, server/server.go DetermineServerTimezone).
func ServerTimezone(env map[string]any, nodeTimezone string) string {
	// time.LoadLocation refuses names with "..", absolute paths and anything
	// that is not a zoneinfo file: a user's variable cannot make it read
	// elsewhere.
	if tz, ok := env["SERVER_TIMEZONE"].(string); ok && tz != "" && tz != "Local" && len(tz) <= 64 {
		if _, err := time.LoadLocation(tz); err == nil {
			return tz
		}
	}
	return nodeTimezone
}

// envValue renders a JSON scalar as a variable value: integral numbers as
// integers (never 25565.000000), other numbers in their shortest form.
func envValue(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		if f, err := x.Float64(); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 && strings.ContainsAny(x.String(), ".eE") {
			return strconv.FormatInt(int64(f), 10)
		}
		return x.String()
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

// MemoryOverheadMultiplier is how much more memory than its limit a container
// may use before the kernel steps in (the JVM and friends need headroom).
func MemoryOverheadMultiplier(memoryMB int64, o config.Overhead) float64 {
	if o.Override {
		best := int64(-1)
		for limit := range o.Multipliers {
			if limit >= memoryMB && (best < 0 || limit < best) {
				best = limit
			}
		}
		if best >= 0 {
			return o.Multipliers[best]
		}
		return o.DefaultMultiplier
	}
	switch {
	case memoryMB <= 2048:
		return 1.15
	case memoryMB <= 4096:
		return 1.10
	default:
		return 1.05
	}
}

// ContainerLimits maps a server's build settings to runtime limits.
func ContainerLimits(b Build, d config.Docker) runtime.Limits {
	var l runtime.Limits
	if b.MemoryLimit > 0 {
		l.MemoryBytes = int64(math.Round(float64(b.MemoryLimit) * MemoryOverheadMultiplier(b.MemoryLimit, d.Overhead) * mib))
		l.MemoryReservationBytes = b.MemoryLimit * mib
		if b.Swap < 0 {
			l.MemorySwapBytes = -1
		} else {
			l.MemorySwapBytes = l.MemoryBytes + b.Swap*mib
		}
	} else if b.Swap < 0 {
		l.MemorySwapBytes = -1
	}
	if b.CPULimit > 0 {
		l.CPUQuota = b.CPULimit * 1000
		l.CPUPeriod = 100000
		l.CPUShares = 1024
	}
	l.CpusetCpus = b.Threads
	l.IOWeight = b.IOWeight
	l.PidsLimit = d.ContainerPidLimit
	l.OOMKillDisable = b.OOMKillDisabled()
	return l
}

// ContainerLabels are the backend's labels plus ours, which win: the
// service, the container type and the node that creates the container
// (runtime.NodeLabel, the node's uuid; never taken from the backend).
func ContainerLabels(c Configuration, containerType, node string) map[string]string {
	labels := make(map[string]string, len(c.Labels)+3)
	for k, v := range c.Labels {
		labels[k] = v
	}
	labels["Service"] = "Wharf"
	labels["ContainerType"] = containerType
	delete(labels, runtime.NodeLabel)
	if node != "" {
		labels[runtime.NodeLabel] = node
	}
	return labels
}

// PortBindings publishes every mapped port on tcp and udp. Only
// allocations.mappings are published; ports outside 1..65535 are skipped.
func PortBindings(a Allocations) []runtime.PortBinding {
	ips := make([]string, 0, len(a.Mappings))
	for ip := range a.Mappings {
		ips = append(ips, ip)
	}
	sort.Strings(ips)
	var out []runtime.PortBinding
	for _, ip := range ips {
		for _, p := range a.Mappings[ip] {
			if p < 1 || p > 65535 {
				continue
			}
			out = append(out,
				runtime.PortBinding{IP: ip, Port: p, Protocol: "tcp"},
				runtime.PortBinding{IP: ip, Port: p, Protocol: "udp"})
		}
	}
	return out
}

// ContainerMounts returns the data directory mount plus the backend's extra
// mounts whose source lies inside one of allowed_mounts. Mounts over the
// server's own directory are refused.
func ContainerMounts(c Configuration, dataDir string, allowed []string) (mounts []runtime.Mount, refused []string) {
	mounts = []runtime.Mount{{Source: dataDir, Target: "/home/container"}}
	for _, m := range c.Mounts {
		src := filepath.Clean(m.Source)
		dst := filepath.Clean(m.Target)
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) || !underAny(src, allowed) ||
			dst == "/home/container" || strings.HasPrefix(dst, "/home/container/") {
			refused = append(refused, m.Source)
			continue
		}
		mounts = append(mounts, runtime.Mount{Source: src, Target: dst, ReadOnly: m.ReadOnly})
	}
	return mounts, refused
}

// withSystemMounts puts the node's file mounts after the data directory;
// a backend mount over one of their targets is refused (the engine would
// refuse the container for the duplicate).
func withSystemMounts(mounts []runtime.Mount, refused []string, system []runtime.Mount) ([]runtime.Mount, []string) {
	out := append([]runtime.Mount{mounts[0]}, system...)
	for _, m := range mounts[1:] {
		if slices.ContainsFunc(system, func(s runtime.Mount) bool { return s.Target == m.Target }) {
			refused = append(refused, m.Source)
			continue
		}
		out = append(out, m)
	}
	return out, refused
}

func underAny(path string, roots []string) bool {
	for _, r := range roots {
		if !filepath.IsAbs(r) {
			continue
		}
		r = filepath.Clean(r)
		if path == r || r == "/" || strings.HasPrefix(path, r+"/") {
			return true
		}
	}
	return false
}

// ServerContainerSpec builds the container of a server from its
// configuration and the node's settings.
func ServerContainerSpec(c Configuration, node *config.Config, dataDir string) (runtime.ContainerSpec, []string) {
	mounts, refused := ContainerMounts(c, dataDir, node.AllowedMounts)
	mounts, refused = withSystemMounts(mounts, refused, systemMounts(node, c.UUID))
	d := node.Docker
	spec := runtime.ContainerSpec{
		Name:       c.UUID,
		Hostname:   c.UUID,
		Domainname: d.Domainname,
		Image:      strings.TrimPrefix(c.Container.Image, "~"),
		User:       fmt.Sprintf("%d:%d", node.System.User.UID, node.System.User.GID),
		Env:        EnvironmentVariables(c, node.System.Timezone),
		Labels:     ContainerLabels(c, "server_process", node.UUID),
		Mounts:     mounts,
		Ports:      PortBindings(c.Allocations),
		Limits:     ContainerLimits(c.Build, d),
		Tmpfs:      map[string]string{"/tmp": fmt.Sprintf("rw,exec,nosuid,size=%dM", d.TmpfsSize)},
		DNS:        d.Network.DNS,
		Network:    d.Network.Mode,
		LogConfig:  runtime.LogConfig{Type: d.LogConfig.Type, Config: d.LogConfig.Config},
		UsernsMode: d.UsernsMode,
		Hardened:   true,
		// Without the lock the game could move its files out of its quota.
		QuotaLocked: node.System.Quotas.Enabled,
	}
	if node.System.User.Rootless.Enabled {
		spec.User = fmt.Sprintf("%d:%d", node.System.User.Rootless.ContainerUID, node.System.User.Rootless.ContainerGID)
	}
	return spec, refused
}
