package daemon

import (
	"fmt"
	"log/slog"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/runtime"
)

// errRootlessCgroupV1 is the boot error on a rootless engine of a cgroup v1
// host (issue 37): the engine creates containers without their memory,
// CPU and process limits and says nothing in its API.
const errRootlessCgroupV1 = "the container engine runs rootless on a cgroup v1 host, where it silently drops every memory, CPU and process limit of the servers: " +
	"boot the host on cgroup v2 (systemd.unified_cgroup_hierarchy=1), run the engine as root, or set docker.rootless_cgroup_v1_accepted: true to accept servers without those limits"

// checkEngine logs what the engine is and refuses a rootless engine on
// cgroup v1 unless the operator accepted it; a rootless engine also gets
// the list of what it needs (Config.RootlessEngineNeeds) in the log.
func checkEngine(rt runtime.Runtime, cfg *config.Config, log *slog.Logger) error {
	d, ok := rt.(runtime.EngineFactser)
	if !ok {
		return nil
	}
	info := d.Facts()
	log.Info("container engine", "engine", info.Name, "version", info.Version, "rootless", info.Rootless,
		"cgroup_version", info.CgroupVersion)
	if !info.Rootless {
		return nil
	}
	for _, need := range cfg.RootlessEngineNeeds() {
		log.Warn("a rootless engine needs", "need", need)
	}
	if info.CgroupVersion != "1" {
		return nil
	}
	if !cfg.Docker.RootlessCgroupV1Accepted {
		return fmt.Errorf("%s", errRootlessCgroupV1)
	}
	log.Warn("the container engine is rootless on cgroup v1: servers run WITHOUT memory, CPU and process limits (docker.rootless_cgroup_v1_accepted: true)")
	return nil
}
