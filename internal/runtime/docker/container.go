package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/consoletext"
	"github.com/wharf/wharf/internal/runtime"
)

// hardenedCapDrop is the capability set dropped from hardened containers
// (Wings' list plus sys_ptrace, as Pelican).
var hardenedCapDrop = []string{
	"setpcap", "mknod", "audit_write", "net_raw", "dac_override", "fowner",
	"fsetid", "net_bind_service", "sys_chroot", "setfcap", "sys_ptrace",
}

// installerCapDrop is the capability set dropped from installers: the
// game's set but for what an install script run as root needs to write
// files it does not own. Kept (the engine grants them by default):
// dac_override, fowner and fsetid: root writing into directories and
// changing the modes of files it does not own (the server's files belong
// to the node's user; dpkg and apt set owners and modes on what they
// unpack, apt's download area belongs to _apt), set-group-id bits kept.
//
// Dropped as for the game: net_raw (no raw or packet sockets: no ARP
// spoofing of a neighbour on the bridge, the reason for this list), mknod
// (device nodes; FIFOs need nothing), audit_write (libaudit hides the
// refusal from a process without it: a root su or runuser still works),
// setpcap, setfcap (a postinst that runs setcap falls back to
// set-user-id; no-new-privileges voids both anyway), net_bind_service,
// sys_chroot, sys_ptrace. chown, setuid, setgid and kill are kept by both.
var installerCapDrop = []string{
	"setpcap", "mknod", "audit_write", "net_raw", "net_bind_service", "sys_chroot", "setfcap", "sys_ptrace",
}

// Create removes any container named spec.Name (unless another node
// created it: see Remove), then creates (never starts) a new one from spec.
func (r *Runtime) Create(ctx context.Context, spec runtime.ContainerSpec) error {
	if spec.Name == "" || spec.Image == "" {
		return errors.New("docker: create: container name and image are required")
	}
	if err := r.Remove(ctx, spec.Name, spec.Labels[runtime.NodeLabel]); err != nil {
		return fmt.Errorf("docker: create %s: %w", spec.Name, err)
	}
	cfg, hostCfg, err := containerConfig(spec)
	if err != nil {
		return fmt.Errorf("docker: create %s: %w", spec.Name, err)
	}
	if r.eng.podman() {
		if err := podmanHostConfig(hostCfg, r.profiles); err != nil {
			return fmt.Errorf("docker: create %s: %w", spec.Name, err)
		}
	}
	resp, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hostCfg, Name: spec.Name})
	if err != nil {
		return wrap("create", spec.Name, err)
	}
	for _, w := range resp.Warnings {
		r.log.Warn("engine warning on container create", "container", spec.Name, "warning", w)
	}
	return nil
}

// containerConfig maps a ContainerSpec onto the engine's create request.
func containerConfig(spec runtime.ContainerSpec) (*container.Config, *container.HostConfig, error) {
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.Name
	}
	exposed, bindings, err := portBindings(spec.Ports)
	if err != nil {
		return nil, nil, err
	}

	cfg := &container.Config{
		Hostname:     hostname,
		Domainname:   spec.Domainname,
		User:         spec.User,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Tty:          true,
		OpenStdin:    true,
		StdinOnce:    false,
		Env:          spec.Env,
		Cmd:          spec.Cmd,
		Entrypoint:   spec.Entrypoint,
		Image:        spec.Image,
		Labels:       spec.Labels,
	}
	if len(exposed) > 0 {
		cfg.ExposedPorts = exposed
	}

	mounts := make([]mount.Mount, 0, len(spec.Mounts))
	for _, m := range spec.Mounts {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	dns, err := dnsServers(spec.DNS)
	if err != nil {
		return nil, nil, err
	}

	hostCfg := &container.HostConfig{
		PortBindings: bindings,
		Mounts:       mounts,
		Tmpfs:        spec.Tmpfs,
		DNS:          dns,
		NetworkMode:  container.NetworkMode(spec.Network),
		UsernsMode:   container.UsernsMode(spec.UsernsMode),
		Resources:    resources(spec.Limits, false),
	}
	if spec.LogConfig.Type != "" {
		hostCfg.LogConfig = container.LogConfig{Type: spec.LogConfig.Type, Config: spec.LogConfig.Config}
	}
	switch {
	case spec.Hardened && spec.HardenedInstaller:
		return nil, nil, errors.New("a container is hardened as a server or as an installer, not both")
	case spec.Hardened:
		hostCfg.SecurityOpt = []string{"no-new-privileges"}
		hostCfg.ReadonlyRootfs = true
		hostCfg.CapDrop = append([]string(nil), hardenedCapDrop...)
	case spec.HardenedInstaller:
		hostCfg.SecurityOpt = []string{"no-new-privileges"}
		hostCfg.CapDrop = append([]string(nil), installerCapDrop...)
	}
	if spec.QuotaLocked {
		profile, err := quotaSeccompProfile()
		if err != nil {
			return nil, nil, err
		}
		hostCfg.SecurityOpt = append(hostCfg.SecurityOpt, "seccomp="+profile)
	}
	return cfg, hostCfg, nil
}

// portBindings exposes and binds each port (on its host address) once; the
// engine's API types hold the port and the address parsed.
func portBindings(ports []runtime.PortBinding) (network.PortSet, network.PortMap, error) {
	exposed := network.PortSet{}
	bindings := network.PortMap{}
	for _, p := range ports {
		proto := strings.ToLower(p.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		if proto != "tcp" && proto != "udp" {
			return nil, nil, fmt.Errorf("port %d: protocol %q is not tcp or udp", p.Port, p.Protocol)
		}
		if p.Port < 1 || p.Port > 65535 {
			return nil, nil, fmt.Errorf("port %d out of range", p.Port)
		}
		port, _ := network.PortFrom(uint16(p.Port), network.IPProtocol(proto))
		exposed[port] = struct{}{}
		var hostIP netip.Addr
		if p.IP != "" {
			ip, err := netip.ParseAddr(p.IP)
			if err != nil {
				return nil, nil, fmt.Errorf("port %d: address %q: %w", p.Port, p.IP, err)
			}
			hostIP = ip
		}
		b := network.PortBinding{HostIP: hostIP, HostPort: strconv.Itoa(p.Port)}
		dup := false
		for _, have := range bindings[port] {
			dup = dup || have == b
		}
		if !dup {
			bindings[port] = append(bindings[port], b)
		}
	}
	return exposed, bindings, nil
}

// dnsServers parses the DNS server addresses (the engine's API type holds
// them parsed); none is nil, so that the image's resolver is kept.
func dnsServers(servers []string) ([]netip.Addr, error) {
	var dns []netip.Addr
	for _, d := range servers {
		ip, err := netip.ParseAddr(d)
		if err != nil {
			return nil, fmt.Errorf("dns server %q: %w", d, err)
		}
		dns = append(dns, ip)
	}
	return dns, nil
}

// resources maps Limits onto the engine's resources. For an update, zero
// values are left out so that the engine keeps the current setting.
func resources(l runtime.Limits, update bool) container.Resources {
	res := container.Resources{
		Memory:            l.MemoryBytes,
		MemoryReservation: l.MemoryReservationBytes,
		MemorySwap:        l.MemorySwapBytes,
		CPUQuota:          l.CPUQuota,
		CPUPeriod:         l.CPUPeriod,
		CPUShares:         l.CPUShares,
		CpusetCpus:        l.CpusetCpus,
		// Zero means "not set". An engine or kernel without block-IO weight
		// support discards the value with a warning rather than failing.
		BlkioWeight: l.IOWeight,
	}
	if l.PidsLimit != 0 {
		pids := l.PidsLimit
		res.PidsLimit = &pids
	}
	if !update {
		oom := l.OOMKillDisable
		res.OomKillDisable = &oom
	}
	return res
}

// Update changes the limits of an existing container in place. Zero fields
// are left unchanged; the OOM-killer setting cannot change live. Podman 4
// has no update route (it answers 404 to any container):
// runtime.ErrLiveUpdateUnsupported, without asking it.
func (r *Runtime) Update(ctx context.Context, name string, limits runtime.Limits) error {
	if r.eng.podman() {
		return fmt.Errorf("docker: update %s: %w", name, runtime.ErrLiveUpdateUnsupported)
	}
	res := resources(limits, true)
	resp, err := r.cli.ContainerUpdate(ctx, name, client.ContainerUpdateOptions{Resources: &res})
	if err != nil {
		return wrap("update", name, err)
	}
	for _, w := range resp.Warnings {
		r.log.Warn("engine warning on container update", "container", name, "warning", w)
	}
	return nil
}

// stream is an attached container: a hijacked connection whose reads are
// the container's combined TTY output and whose writes go to its stdin.
type stream struct {
	conn  io.Writer
	r     *bufio.Reader
	close func()
	once  sync.Once
	stop  func() bool
}

func (s *stream) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s *stream) Write(p []byte) (int, error) { return s.conn.Write(p) }

// Close closes the connection; the container keeps running.
func (s *stream) Close() error {
	s.once.Do(func() {
		s.stop()
		s.close()
	})
	return nil
}

// Attach connects to the container's stdin and combined output. The stream
// ends (io.EOF) when the container stops, and is closed when ctx ends.
func (r *Runtime) Attach(ctx context.Context, name string) (runtime.Stream, error) {
	if r.eng.podman() {
		if err := r.podmanInit(ctx, name); err != nil {
			return nil, wrap("attach", name, err)
		}
	}
	hr, err := r.cli.ContainerAttach(ctx, name, client.ContainerAttachOptions{
		Stream: true,
		Stdin:  true,
		Stdout: true,
		Stderr: true,
	})
	if err != nil {
		// A hijack failure does not carry a typed status: ask again.
		if _, ierr := r.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); cerrdefs.IsNotFound(ierr) {
			return nil, wrap("attach", name, ierr)
		}
		return nil, wrap("attach", name, err)
	}
	s := &stream{conn: hr.Conn, r: hr.Reader, close: hr.Close}
	s.stop = context.AfterFunc(ctx, func() { hr.Close() })
	return s, nil
}

// Start starts a created container.
func (r *Runtime) Start(ctx context.Context, name string) error {
	_, err := r.cli.ContainerStart(ctx, name, client.ContainerStartOptions{})
	return wrap("start", name, err)
}

// Stop sends the container's stop signal and lets the engine kill it after
// timeout (rounded up to whole seconds; < 0 waits forever). Stopping a
// container that is not running is not an error.
func (r *Runtime) Stop(ctx context.Context, name string, timeout time.Duration) error {
	secs := -1
	if timeout >= 0 {
		secs = int(math.Ceil(timeout.Seconds()))
	}
	_, err := r.cli.ContainerStop(ctx, name, client.ContainerStopOptions{Timeout: &secs})
	return wrap("stop", name, err)
}

// signals are the names accepted by Signal, in Docker's spelling.
var signals = map[string]bool{
	"SIGTERM": true, "SIGINT": true, "SIGABRT": true, "SIGKILL": true,
	"SIGHUP": true, "SIGQUIT": true, "SIGUSR1": true, "SIGUSR2": true,
}

// signalName normalises "sigterm", "TERM", "SIGTERM" to "SIGTERM".
func signalName(sig string) (string, error) {
	s := strings.ToUpper(strings.TrimSpace(sig))
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	if !signals[s] {
		return "", fmt.Errorf("docker: unsupported signal %q", sig)
	}
	return s, nil
}

// Signal sends a signal to the container's main process.
func (r *Runtime) Signal(ctx context.Context, name string, sig string) error {
	s, err := signalName(sig)
	if err != nil {
		return err
	}
	_, err = r.cli.ContainerKill(ctx, name, client.ContainerKillOptions{Signal: s})
	if err == nil {
		return nil
	}
	err = wrap("signal", name, err)
	if !errors.Is(err, runtime.ErrNotFound) && isNotRunning(err) {
		return fmt.Errorf("%w: %w", runtime.ErrNotRunning, err)
	}
	return err
}

// Wait blocks until the container is not running, then reports its state.
// A container that was created but never started is "not running" too.
func (r *Runtime) Wait(ctx context.Context, name string) (runtime.State, error) {
	wr := r.cli.ContainerWait(ctx, name, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-wr.Result:
	case err := <-wr.Error:
		if err != nil {
			return runtime.State{}, wrap("wait", name, err)
		}
	case <-ctx.Done():
		return runtime.State{}, ctx.Err()
	}
	st, err := r.Inspect(ctx, name)
	if err == nil && st.ExitCode == 137 && !st.OOMKilled && !r.eng.podman() {
		st.OOMKilled = r.lateOOM(ctx, name, st.StartedAt)
	}
	return st, err
}

// oomGrace is how long after a SIGKILL exit the engine's "oom" event of the
// container may still come. When the kernel's OOM kill and the exit race,
// Docker can publish the exit first (0.2 s apart under load) and then
// leaves State.OOMKilled false for good; its event log still has the oom.
const oomGrace = time.Second

// lateOOM reports whether the engine published an "oom" event for the
// container since it started, waiting up to oomGrace for one (Podman emits
// none on cgroup v1, and reports OOM kills in its state on v2).
func (r *Runtime) lateOOM(ctx context.Context, name string, since time.Time) bool {
	ctx, cancel := context.WithTimeout(ctx, oomGrace+10*time.Second)
	defer cancel()
	until := time.Now().Add(oomGrace)
	opts := client.EventsListOptions{
		Until:   fmt.Sprintf("%d.%09d", until.Unix(), until.Nanosecond()),
		Filters: make(client.Filters).Add("type", "container").Add("container", name).Add("event", "oom"),
	}
	if !since.IsZero() {
		opts.Since = fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond())
	}
	res := r.cli.Events(ctx, opts)
	select {
	case <-res.Messages:
		return true
	case <-res.Err: // io.EOF once until has passed, or an error: no oom seen
		return false
	case <-ctx.Done():
		return false
	}
}

// Inspect returns the container's state, or runtime.ErrNotFound.
func (r *Runtime) Inspect(ctx context.Context, name string) (runtime.State, error) {
	res, err := r.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		return runtime.State{}, wrap("inspect", name, err)
	}
	info := res.Container
	var st runtime.State
	if info.State != nil {
		st.Running = info.State.Running
		st.ExitCode = info.State.ExitCode
		st.OOMKilled = info.State.OOMKilled
		st.Pid = info.State.Pid
		if t, err := time.Parse(time.RFC3339Nano, info.State.StartedAt); err == nil && t.Year() > 1 {
			st.StartedAt = t
		}
	}
	return st, nil
}

// ListRunning returns the names of the engine's running containers, in one
// call (runtime.RunningLister).
func (r *Runtime) ListRunning(ctx context.Context) (map[string]bool, error) {
	res, err := r.cli.ContainerList(ctx, client.ContainerListOptions{})
	if err != nil {
		return nil, wrap("list", "", err)
	}
	out := make(map[string]bool, len(res.Items))
	for _, c := range res.Items {
		for _, n := range c.Names {
			out[strings.TrimPrefix(n, "/")] = true
		}
	}
	return out, nil
}

// Remove force-removes the container and its anonymous volumes. A missing
// container is not an error. With a node, a container whose NodeLabel names
// another node is left alone (*runtime.OtherNodeError), and the container
// removed is the one inspected, not one created under the name since.
func (r *Runtime) Remove(ctx context.Context, name, node string) error {
	id := name
	if node != "" {
		res, err := r.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return wrap("remove", name, err)
		}
		info := res.Container
		if info.Config != nil {
			if owner := info.Config.Labels[runtime.NodeLabel]; owner != "" && owner != node {
				return &runtime.OtherNodeError{Container: name, Node: owner}
			}
		}
		id = info.ID
	}
	_, err := r.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return wrap("remove", name, err)
	}
	return nil
}

// maxLogLine bounds one line returned by Logs; the rest of a longer line
// is dropped.
const maxLogLine = 64 << 10

// Logs returns up to the last n lines of the container's log (stdout and
// stderr), without trailing "\r".
func (r *Runtime) Logs(ctx context.Context, name string, n int) ([]string, error) {
	if n <= 0 {
		return nil, nil
	}
	res, err := r.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		return nil, wrap("logs", name, err)
	}
	info := res.Container
	rc, err := r.cli.ContainerLogs(ctx, name, client.ContainerLogsOptions{
		ShowStdout: true,
		ShowStderr: true,
		Tail:       strconv.Itoa(n),
	})
	if err != nil {
		return nil, wrap("logs", name, err)
	}
	defer rc.Close()

	var src io.Reader = rc
	if info.Config == nil || !info.Config.Tty {
		// Without a TTY the log is multiplexed (stdout/stderr frames).
		pr, pw := io.Pipe()
		copied := make(chan struct{})
		go func() {
			defer close(copied)
			_, err := stdcopy.StdCopy(pw, pw, rc)
			pw.CloseWithError(err)
		}()
		// Closing both ends stops the copy wherever it is; then wait for it.
		defer func() {
			_ = pr.Close()
			_ = rc.Close()
			<-copied
		}()
		src = pr
	}
	var lines []string
	err = consoletext.ReadLines(src, maxLogLine, func(l string) { lines = append(lines, l) })
	if err != nil {
		return nil, wrap("logs", name, err)
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, nil
}
