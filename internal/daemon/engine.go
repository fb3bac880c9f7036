package daemon

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/rootless"
	"github.com/wharf/wharf/internal/runtime"
)

// errRootlessCgroupV1 is the boot error on a rootless engine of a cgroup v1
// host (issue 37): the engine creates containers without their memory,
// CPU and process limits and says nothing in its API.
const errRootlessCgroupV1 = "the container engine runs rootless on a cgroup v1 host, where it silently drops every memory, CPU and process limit of the servers: " +
	"boot the host on cgroup v2 (systemd.unified_cgroup_hierarchy=1), run the engine as root, or set docker.rootless_cgroup_v1_accepted: true to accept servers without those limits"

// errRootlessFirewall is the boot error on a rootless engine (issue 37):
// the servers' traffic never crosses the host's nftables rules.
const errRootlessFirewall = "the container engine runs rootless: its bridge lives in the engine's own network namespace and its traffic leaves through slirp4netns, " +
	"where Wharf's firewall does not apply (servers could reach each other's unpublished ports, the cloud's metadata endpoint and the node's private networks; force_outgoing_ip is ignored): " +
	"run the engine as root, or set docker.rootless_without_firewall_accepted: true to accept servers without those protections"

// checkEngine logs what the engine is and refuses a rootless engine (no
// firewall) and a rootless engine on cgroup v1 (no limits) unless the
// operator accepted each; a rootless engine also gets
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
	prepareRootless(cfg, log)
	if !cfg.Docker.RootlessWithoutFirewallAccepted {
		return fmt.Errorf("%s", errRootlessFirewall)
	}
	log.Warn("the container engine is rootless: servers run WITHOUT Wharf's firewall (neighbour isolation, blocked destinations; docker.rootless_without_firewall_accepted: true)")
	if info.CgroupVersion != "1" {
		return nil
	}
	if !cfg.Docker.RootlessCgroupV1Accepted {
		return fmt.Errorf("%s", errRootlessCgroupV1)
	}
	log.Warn("the container engine is rootless on cgroup v1: servers run WITHOUT memory, CPU and process limits (docker.rootless_cgroup_v1_accepted: true)")
	return nil
}

// prepareRootless makes the directories Wharf mounts from enterable by a
// rootless engine's user, where they are Wharf's own (rootless.Prepare),
// and logs what the operator must still do (subuid/subgid, a parent
// directory Wharf does not own, system.username). It does not stop the
// boot: a server that cannot start says why then.
func prepareRootless(cfg *config.Config, log *slog.Logger) {
	host := cfg.Docker.Host
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	u, err := rootless.EngineUser(host)
	if err != nil {
		log.Warn("rootless engine: Wharf cannot prepare the node for it", "error", err)
		for _, need := range cfg.RootlessEngineNeeds() {
			log.Warn("a rootless engine needs", "need", need)
		}
		return
	}
	found, err := rootless.Prepare(cfg, u, rootless.Options{})
	if err != nil {
		log.Error("rootless engine: preparing the node failed", "error", err)
	}
	for _, f := range found {
		switch f.Level {
		case rootless.Fixed:
			log.Info("rootless engine: prepared", "change", f.Text)
		case rootless.Operator:
			log.Warn("rootless engine: the operator must act", "problem", f.Text)
		}
	}
}
