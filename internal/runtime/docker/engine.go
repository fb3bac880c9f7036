package docker

import (
	"context"
	"strings"

	"github.com/moby/moby/client"

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
	res, err := r.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return EngineInfo{}, wrap("info", "", err)
	}
	info := res.Info
	out := EngineInfo{
		Name:            r.eng.name,
		Rootless:        r.eng.rootless,
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
	res, err := r.cli.ImagePrune(ctx, client.ImagePruneOptions{Filters: make(client.Filters).Add("dangling", "true")})
	if err != nil {
		return runtime.PruneReport{}, wrap("prune images", "", err)
	}
	rep := res.Report
	out := runtime.PruneReport{SpaceReclaimed: rep.SpaceReclaimed}
	for _, d := range rep.ImagesDeleted {
		out.Deleted = append(out.Deleted, runtime.DeletedImage{Untagged: d.Untagged, Deleted: imageID(d.Deleted)})
	}
	return out, nil
}

// imageID is an image id as Docker spells it, "sha256:" and the digest:
// Podman answers the bare hex digest.
func imageID(id string) string {
	if len(id) != 64 || strings.Contains(id, ":") {
		return id
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return id
		}
	}
	return "sha256:" + id
}
