// Package runtime is the container runtime interface the server domain drives.
// It knows nothing about panels, HTTP or server configuration: the server
// domain turns those into a ContainerSpec. runtime/docker implements it.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrNotFound is returned when the named container (or image) does not exist.
var ErrNotFound = errors.New("runtime: not found")

// ErrNotRunning is returned by Signal when the container exists but is not
// running (it exited between the caller's check and the signal).
var ErrNotRunning = errors.New("runtime: container not running")

// ErrLiveUpdateUnsupported is returned by Update when the engine cannot
// change a running container's limits (Podman 4 has no update route): the
// new limits apply when the container is next created, at its next start.
var ErrLiveUpdateUnsupported = errors.New("runtime: the engine cannot change a running container's limits; they apply at the next start")

// NodeLabel is the container label naming the node (its configuration
// `uuid`) that created the container. Several nodes may share one engine,
// and a container's name (the server UUID) does not say whose it is.
const NodeLabel = "NodeUUID"

// OtherNodeError is returned by Remove (and Create, which removes first)
// when the container of that name carries the NodeLabel of another node:
// it is left alone.
type OtherNodeError struct {
	Container string
	Node      string // the node named by the label
}

func (e *OtherNodeError) Error() string {
	return fmt.Sprintf("runtime: container %s belongs to node %s", e.Container, e.Node)
}

// Runtime runs containers. Every method is safe for concurrent use.
type Runtime interface {
	// EnsureImage makes the image available locally. A leading "~" means a
	// local-only image that is never pulled. A failed pull of an image that
	// exists locally is not an error (the caller is told through progress).
	EnsureImage(ctx context.Context, image string, auth *RegistryAuth, progress func(line string)) error
	// Create creates (never starts) a container from spec. An existing
	// container with the same name is removed first, as Remove does with
	// spec.Labels[NodeLabel] as the node: one that another node created
	// is left alone and the create fails with an *OtherNodeError.
	Create(ctx context.Context, spec ContainerSpec) error
	// Attach connects to the container's stdin and its combined output. It
	// must be called before Start to see the very first output line.
	Attach(ctx context.Context, name string) (Stream, error)
	// Start starts a created container.
	Start(ctx context.Context, name string) error
	// Stop asks the container to stop (docker stop semantics) and waits up to
	// timeout before the engine kills it; timeout < 0 waits forever.
	Stop(ctx context.Context, name string, timeout time.Duration) error
	// Signal sends a signal ("SIGTERM", "SIGINT", "SIGABRT", "SIGKILL", ...).
	// A container that is not running gives ErrNotRunning.
	Signal(ctx context.Context, name string, signal string) error
	// Wait blocks until the container is not running and returns its state.
	Wait(ctx context.Context, name string) (State, error)
	// Inspect returns the container state, or ErrNotFound.
	Inspect(ctx context.Context, name string) (State, error)
	// Stats streams resource samples until ctx ends or the container stops;
	// the channel is closed then.
	Stats(ctx context.Context, name string) (<-chan Stats, error)
	// Update changes the limits of an existing container in place.
	Update(ctx context.Context, name string, limits Limits) error
	// Logs returns up to the last n lines of the container's log.
	Logs(ctx context.Context, name string, n int) ([]string, error)
	// Remove force-removes the container; a missing container is not an
	// error. When node is not empty and the container's NodeLabel names
	// another node, the container is left alone and the error is an
	// *OtherNodeError; a container without the label (made by an older
	// version or another agent) is removed.
	Remove(ctx context.Context, name, node string) error
	// EnsureNetwork creates the network when missing and reports what exists.
	EnsureNetwork(ctx context.Context, spec NetworkSpec) (NetworkInfo, error)
}

// Stream is an attached container: its output and its stdin.
type Stream interface {
	io.Reader // combined stdout/stderr (TTY)
	io.Writer // stdin
	io.Closer
}

// RegistryAuth holds credentials for an image registry.
type RegistryAuth struct {
	Username string
	Password string
}

// ContainerSpec is everything needed to create a container.
type ContainerSpec struct {
	Name       string // also the hostname unless Hostname is set
	Hostname   string
	Domainname string
	Image      string // without a leading "~"
	Cmd        []string
	Entrypoint []string
	User       string // "uid:gid" or empty for the image's user
	Env        []string
	Labels     map[string]string
	Mounts     []Mount
	Ports      []PortBinding
	Limits     Limits
	Tmpfs      map[string]string // path -> options
	DNS        []string
	Network    string // network mode / name
	LogConfig  LogConfig
	UsernsMode string
	// Hardened applies no-new-privileges, a read-only root filesystem and
	// the dropped capability set of game servers.
	Hardened bool
	// HardenedInstaller is the installer's hardening: no-new-privileges and
	// the game's dropped capability set minus what a package manager run as
	// root needs (raw and packet sockets stay refused); the root filesystem
	// stays writable, as eggs install packages into the image. Exclusive
	// with Hardened.
	HardenedInstaller bool
	// QuotaLocked runs the container under Docker's default seccomp profile
	// with the ioctls that change a file's project quota refused
	// (system.quotas: a process must not take its files out of the quota).
	QuotaLocked bool
}

// Mount is a bind mount.
type Mount struct {
	Source   string
	Target   string
	ReadOnly bool
}

// PortBinding publishes one host ip:port to the same container port.
type PortBinding struct {
	IP       string
	Port     int
	Protocol string // "tcp" or "udp"
}

// Limits are the container's resource limits. Zero means "not set".
type Limits struct {
	MemoryBytes            int64 // hard limit
	MemoryReservationBytes int64
	MemorySwapBytes        int64 // -1 = unlimited
	CPUQuota               int64 // microseconds per CPUPeriod
	CPUPeriod              int64
	CPUShares              int64
	CpusetCpus             string
	IOWeight               uint16
	PidsLimit              int64
	OOMKillDisable         bool
}

// LogConfig selects the container log driver.
type LogConfig struct {
	Type   string
	Config map[string]string
}

// State is what Inspect and Wait report.
type State struct {
	Running   bool
	ExitCode  int
	OOMKilled bool
	StartedAt time.Time
	// Pid is the host's process id of the container's first process while
	// it runs, 0 when unknown (the disk monitor finds the container's
	// processes from it).
	Pid int
}

// Stats is one resource sample.
type Stats struct {
	MemoryBytes      uint64
	MemoryLimitBytes uint64
	CPUAbsolute      float64
	RxBytes          uint64
	TxBytes          uint64
	// DiskReadBytes and DiskWriteBytes are the container's block I/O
	// counters since it started (blkio on cgroup v1, io.stat on v2).
	DiskReadBytes  uint64
	DiskWriteBytes uint64
}

// NetworkSpec describes the node's container network.
type NetworkSpec struct {
	Name       string
	Driver     string
	BridgeName string
	Internal   bool
	EnableICC  bool
	MTU        int
	IPv4Subnet string
	IPv4Gate   string
	IPv6Subnet string
	IPv6Gate   string
	EnableIPv6 bool
	// HostIPv4 is the source address of the bridge's masquerade: the
	// containers' outgoing traffic leaves from it (empty: the engine's
	// choice, the host's primary address).
	HostIPv4 string
}

// NetworkInfo is what exists after EnsureNetwork.
type NetworkInfo struct {
	Driver     string
	IPv4Subnet string
	IPv4Gate   string
	Created    bool
	// BridgeName is the host interface of a bridge network (the engine's
	// com.docker.network.bridge.name option, else br-<first 12 of the
	// network id>); empty for other drivers.
	BridgeName string
}
