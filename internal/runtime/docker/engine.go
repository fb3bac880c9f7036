package docker

import (
	"context"
	"strings"
	"time"

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
// The engine runs one prune at a time and refuses another meanwhile (409,
// "a prune operation is already running": an operator's cron, another
// tool): the panel's prune waits for it, then prunes what is left.
func (r *Runtime) PruneImages(ctx context.Context) (runtime.PruneReport, error) {
	res, err := whilePruneRunning(ctx, func() (client.ImagePruneResult, error) {
		return r.cli.ImagePrune(ctx, client.ImagePruneOptions{Filters: make(client.Filters).Add("dangling", "true")})
	})
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

// pruneRetry is how often a prune refused because another was running is
// asked again, for at most pruneWait.
const (
	pruneRetry = 250 * time.Millisecond
	pruneWait  = 2 * time.Minute
)

// whilePruneRunning calls prune until the engine stops refusing it for a
// prune already running, ctx ends or pruneWait has passed.
func whilePruneRunning[T any](ctx context.Context, prune func() (T, error)) (T, error) {
	deadline := time.Now().Add(pruneWait)
	for {
		res, err := prune()
		if err == nil || !pruneRunning(err) || time.Now().After(deadline) {
			return res, err
		}
		t := time.NewTimer(pruneRetry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return res, err
		}
	}
}

// pruneRunning is the engine's refusal of a prune while another runs (a
// 409 from Docker; matched by its message, which Podman shares).
func pruneRunning(err error) bool {
	return strings.Contains(err.Error(), "prune operation is already running")
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
