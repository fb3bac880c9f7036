package docker

import (
	"context"

	"github.com/docker/docker/api/types/filters"

	"github.com/wharf/wharf/internal/runtime"
)

// EngineInfo describes the engine (runtime.EngineInfo).
type EngineInfo = runtime.EngineInfo

var (
	_ runtime.EngineDescriber = (*Runtime)(nil)
	_ runtime.ImagePruner     = (*Runtime)(nil)
)

// EngineInfo asks the engine what it is.
func (r *Runtime) EngineInfo(ctx context.Context) (EngineInfo, error) {
	info, err := r.cli.Info(ctx)
	if err != nil {
		return EngineInfo{}, wrap("info", "", err)
	}
	out := EngineInfo{
		Version:         info.ServerVersion,
		APIVersion:      r.cli.ClientVersion(),
		StorageDriver:   info.Driver,
		CgroupVersion:   info.CgroupVersion,
		CgroupDriver:    info.CgroupDriver,
		Containers:      info.Containers,
		Running:         info.ContainersRunning,
		Paused:          info.ContainersPaused,
		Stopped:         info.ContainersStopped,
		RuncVersion:     info.RuncCommit.ID,
		MemoryBytes:     info.MemTotal,
		OperatingSystem: info.OperatingSystem,
	}
	for _, kv := range info.DriverStatus {
		if len(kv) == 2 && kv[0] == "Backing Filesystem" {
			out.BackingFilesystem = kv[1]
		}
	}
	return out, nil
}

// PruneImages removes the dangling images; the engine keeps every image a
// container uses, stopped containers included.
func (r *Runtime) PruneImages(ctx context.Context) (runtime.PruneReport, error) {
	rep, err := r.cli.ImagesPrune(ctx, filters.NewArgs(filters.Arg("dangling", "true")))
	if err != nil {
		return runtime.PruneReport{}, wrap("prune images", "", err)
	}
	out := runtime.PruneReport{SpaceReclaimed: rep.SpaceReclaimed}
	for _, d := range rep.ImagesDeleted {
		out.Deleted = append(out.Deleted, runtime.DeletedImage{Untagged: d.Untagged, Deleted: d.Deleted})
	}
	return out, nil
}
