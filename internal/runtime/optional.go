package runtime

import "context"

// Optional abilities: a Runtime may implement these; callers type-assert
// and answer "not supported" when it does not.

// ImagePruner removes the engine's dangling images (untagged, and used by
// no container, stopped ones included).
type ImagePruner interface {
	PruneImages(ctx context.Context) (PruneReport, error)
}

// PruneReport is what a prune removed.
type PruneReport struct {
	Deleted        []DeletedImage
	SpaceReclaimed uint64 // bytes
}

// DeletedImage is one removal: a tag removed (Untagged) or an image
// deleted (Deleted, its id).
type DeletedImage struct {
	Untagged string
	Deleted  string
}

// EngineDescriber reports what the container engine is.
type EngineDescriber interface {
	EngineInfo(ctx context.Context) (EngineInfo, error)
}

// EngineInfo describes the engine (diagnostics, GET /api/system?v=2).
type EngineInfo struct {
	// Name is "Docker" or "Podman" (issue 37); Rootless is true for an
	// engine that runs without root.
	Name              string
	Rootless          bool
	Version           string
	APIVersion        string
	StorageDriver     string
	BackingFilesystem string
	CgroupVersion     string
	CgroupDriver      string
	Containers        int
	Running           int
	Paused            int
	Stopped           int
	RuncVersion       string // runc commit id
	MemoryBytes       int64  // the host's memory as the engine sees it
	OperatingSystem   string
}

// EngineFacts is what a runtime learnt of its engine when it connected
// (issue 37): which engine, whether it runs rootless, the cgroup version.
type EngineFacts struct {
	Name          string // "Docker" or "Podman"
	Version       string
	Rootless      bool
	CgroupVersion string // "1" or "2"
}

// EngineFactser is implemented by runtimes that know their engine.
type EngineFactser interface {
	Facts() EngineFacts
}

// NetworkInspector reports a network as the engine has it (the
// diagnostics report reads the node's bridge from it).
type NetworkInspector interface {
	InspectNetwork(ctx context.Context, name string) (NetworkInfo, error)
}

// RunningLister lists the engine's running containers by name in one call
// (issue 38: the boot re-attaches a node's running servers from one list
// instead of inspecting every server's container).
type RunningLister interface {
	ListRunning(ctx context.Context) (map[string]bool, error)
}
