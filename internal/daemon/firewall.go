package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/firewall"
	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/usererr"
)

// applyICCDefault applies Wharf's secure default of
// docker.network.enable_icc to a configuration taken over from Wings (or
// written by an older Wharf) and saves the file with its mark
// (config.ApplyICCDefault, docs/migrating-from-wings.md).
func applyICCDefault(store *config.Store, log *slog.Logger) error {
	if store.Get().Docker.Network.ICCDefaultApplied {
		return nil
	}
	var reset bool
	if err := store.Update(func(c *config.Config) { reset = c.ApplyICCDefault() }); err != nil {
		return fmt.Errorf("saving docker.network.enable_icc's default: %w", err)
	}
	if reset {
		log.Warn("docker.network.enable_icc was true in a configuration written before Wharf's secure default (Wings' default, or an older Wharf): turned off, so that servers reach each other only through their published ports; set it to true again to allow container-to-container traffic (docs/migrating-from-wings.md)")
	}
	return nil
}

// startFirewall installs Wharf's firewall for the node's bridge and puts
// the servers' runtime behind it: no container starts while its rules are
// not in place. The fake runtime of the test builds has no bridge and no
// firewall. A failed install does not stop the boot: the node answers the
// panel, and every start says why it is refused.
func (n *node) startFirewall(context.Context) error {
	n.serverRuntime = n.rt
	cfg := n.store.Get()
	nw := cfg.Docker.Network
	if nw.EnableICC {
		n.log.Warn("docker.network.enable_icc is on: containers on the node's bridge reach each other's unpublished ports directly")
	}
	switch {
	case cfg.Testing.Runtime == config.TestRuntimeFake:
		n.log.Info("no firewall: the in-memory test runtime has no bridge")
		return nil
	case !nw.Firewall:
		n.log.Warn("WHARF'S FIREWALL IS OFF (docker.network.firewall: false): containers can reach the cloud metadata service, link-local and blocked destinations, and their neighbours' ports if the engine's own ICC setting allows it")
		return nil
	case n.network.BridgeName == "":
		n.log.Warn("the node's network is not a bridge: Wharf's firewall has nothing to filter, containers are not isolated by it", "driver", n.network.Driver)
		return nil
	}
	fw := newFirewall(cfg, n.log)
	if _, err := fw.AddBridge(firewallBridge(n.network)); err != nil {
		return err
	}
	if err := fw.Install(); err != nil {
		n.log.Error("Wharf's firewall could not be installed: servers and installers will not start until it is", "error", err)
	} else {
		n.log.Info("firewall installed", "bridge", n.network.BridgeName, "table", firewall.TableName(n.network.BridgeName),
			"enable_icc", nw.EnableICC, "blocked_destinations", fw.Blocked())
	}
	n.firewall = fw
	n.serverRuntime = &guardedRuntime{Runtime: n.rt, fw: fw, log: n.log}
	return nil
}

// firewallWatchInterval is how often the running daemon verifies its rules
// (and reinstalls them when they were deleted): running servers are not
// left without them until the next start.
const firewallWatchInterval = 30 * time.Second

// startFirewallWatch verifies the firewall's rules every interval until
// stopped (the stop waits for the goroutine).
func (n *node) startFirewallWatch(ctx context.Context) error {
	n.stopWatch = func() {}
	if n.firewall == nil {
		return nil
	}
	wctx, stop := context.WithCancel(ctx)
	var done sync.WaitGroup
	n.stopWatch = func() { stop(); done.Wait() }
	done.Go(func() { watchFirewall(wctx, n.firewall, n.log, firewallWatchInterval) })
	return nil
}

// watchFirewall calls Ensure every interval until ctx ends; a failure is
// logged (starts are refused by the guard meanwhile).
func watchFirewall(ctx context.Context, fw *firewall.Firewall, log *slog.Logger, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := fw.Ensure()
		switch {
		case err != nil:
			log.Error("Wharf's firewall is not in place and cannot be reinstalled: servers and installers do not start", "error", err)
			failing = true
		case failing:
			log.Info("Wharf's firewall is in place again")
			failing = false
		}
	}
}

func newFirewall(cfg *config.Config, log *slog.Logger) *firewall.Firewall {
	nw := cfg.Docker.Network
	var blocked []netip.Prefix
	for _, s := range nw.BlockedDestinations {
		if p, err := config.ParseDestination(s); err == nil { // validated at load
			blocked = append(blocked, p)
		}
	}
	return firewall.New(firewall.Options{AllowICC: nw.EnableICC, Blocked: blocked, Log: log})
}

func firewallBridge(info runtime.NetworkInfo) firewall.Bridge {
	b := firewall.Bridge{Name: info.BridgeName}
	if p, err := netip.ParsePrefix(info.IPv4Subnet); err == nil {
		b.IPv4Subnet = p
	}
	return b
}

// guardedRuntime is the servers' runtime when Wharf's firewall is on:
// every container start (servers and installers alike) first verifies the
// firewall's rules, reinstalling them when they are missing, and is
// refused when they cannot be; every bridge network the servers ensure
// (per-IP networks) is added to the firewall.
type guardedRuntime struct {
	runtime.Runtime
	fw  *firewall.Firewall
	log *slog.Logger
}

// Facts are the guarded runtime's engine facts (runtime.EngineFactser),
// which the servers read (a rootless engine's install script directory,
// issue 37); zero when it has none.
func (g *guardedRuntime) Facts() runtime.EngineFacts {
	if f, ok := g.Runtime.(runtime.EngineFactser); ok {
		return f.Facts()
	}
	return runtime.EngineFacts{}
}

// Start starts the container only with the firewall's rules in place.
func (g *guardedRuntime) Start(ctx context.Context, name string) error {
	if err := g.fw.Ensure(); err != nil {
		g.log.Error("container not started: Wharf's firewall is not in place", "container", name, "error", err)
		return usererr.Wrap(err, usererr.Conflict, "The node's network firewall is not in place, so no server or installer starts on this node: "+err.Error())
	}
	return g.Runtime.Start(ctx, name)
}

// ListRunning is the engine's, when it has one (runtime.RunningLister).
func (g *guardedRuntime) ListRunning(ctx context.Context) (map[string]bool, error) {
	if l, ok := g.Runtime.(runtime.RunningLister); ok {
		return l.ListRunning(ctx)
	}
	return nil, errors.ErrUnsupported
}

// EnsureNetwork adds a bridge network the servers use to the firewall; its
// rules are installed by the next Start's check.
func (g *guardedRuntime) EnsureNetwork(ctx context.Context, spec runtime.NetworkSpec) (runtime.NetworkInfo, error) {
	info, err := g.Runtime.EnsureNetwork(ctx, spec)
	if err == nil && info.BridgeName != "" {
		if _, aerr := g.fw.AddBridge(firewallBridge(info)); aerr != nil {
			return info, aerr
		}
	}
	return info, err
}
