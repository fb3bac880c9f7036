package docker

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/runtime"
)

// EnsureNetwork creates the network described by spec when no network of
// that name exists, and reports the driver, IPv4 subnet and gateway of the
// network as the engine has it (re-inspected after a creation). When the
// requested IPv4 subnet overlaps an existing network, the network is created
// with a subnet the engine chooses, and that subnet is reported.
func (r *Runtime) EnsureNetwork(ctx context.Context, spec runtime.NetworkSpec) (runtime.NetworkInfo, error) {
	if spec.Name == "" {
		return runtime.NetworkInfo{}, fmt.Errorf("docker: network name is required")
	}
	if res, err := r.networkInspect(ctx, spec.Name); err == nil {
		return r.networkInfo(ctx, res.Network, false)
	} else if !cerrdefs.IsNotFound(err) {
		return runtime.NetworkInfo{}, wrap("inspect network", spec.Name, err)
	}

	create := func(spec runtime.NetworkSpec, withV4, withV6 bool) error {
		opts, err := networkCreateOptions(spec, withV4, withV6)
		if err != nil {
			return err
		}
		res, err := r.cli.NetworkCreate(ctx, spec.Name, opts)
		for _, w := range res.Warning {
			// Podman names each Docker option it ignores (ICC, masquerade,
			// host binding): Wharf's firewall enforces the isolation.
			r.log.Warn("engine warning on network create", "network", spec.Name, "warning", w)
		}
		return err
	}
	err := create(spec, true, true)
	if err != nil && spec.IPv4Subnet != "" && isPoolOverlap(err) {
		r.log.Warn("network subnet overlaps an existing network; letting the engine choose one",
			"network", spec.Name, "subnet", spec.IPv4Subnet, "error", err)
		err = create(spec, false, true)
	}
	if err != nil && spec.EnableIPv6 && spec.IPv6Subnet != "" && isPoolOverlap(err) {
		// The IPv6 subnet overlaps too (another node's network on the same
		// engine): let the engine choose that one as well.
		r.log.Warn("network IPv6 subnet overlaps an existing network; letting the engine choose one",
			"network", spec.Name, "subnet", spec.IPv6Subnet, "error", err)
		err = create(spec, false, false)
		if err != nil && !cerrdefs.IsConflict(err) {
			r.log.Warn("the engine cannot choose an IPv6 subnet; creating the network without IPv6",
				"network", spec.Name, "error", err)
			noV6 := spec
			noV6.EnableIPv6 = false
			err = create(noV6, false, false)
		}
	}
	created := err == nil
	if err != nil && !cerrdefs.IsConflict(err) && !strings.Contains(err.Error(), "already exists") {
		return runtime.NetworkInfo{}, wrap("create network", spec.Name, err)
	}
	// Re-inspect: report what the engine actually has, not the request (a
	// network created concurrently by someone else counts as existing).
	res, err := r.networkInspect(ctx, spec.Name)
	if err != nil {
		return runtime.NetworkInfo{}, wrap("inspect network", spec.Name, err)
	}
	return r.networkInfo(ctx, res.Network, created)
}

// networkInfo is networkInfo with, on Podman, the bridge's name from
// Podman's own API (its compatible inspect leaves the name out, and its
// bridges are not named after the network's id).
func (r *Runtime) networkInfo(ctx context.Context, nw network.Inspect, created bool) (runtime.NetworkInfo, error) {
	info := networkInfo(nw, created)
	if r.eng.podman() {
		name, err := r.podmanBridgeName(ctx, nw.Name)
		if err != nil {
			return runtime.NetworkInfo{}, fmt.Errorf("docker: inspect network %s with Podman's API: %w", nw.Name, err)
		}
		info.BridgeName = name
	}
	return info, nil
}

// isPoolOverlap reports whether a network creation failed because the
// requested address pool is already in use: Docker says the pool
// overlaps; Podman that the "subnet … is already used on the host or by
// another config".
func isPoolOverlap(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "overlap") || strings.Contains(msg, "pool") && strings.Contains(msg, "in use") ||
		strings.Contains(msg, "subnet") && strings.Contains(msg, "already used")
}

// networkCreateOptions builds the create request; withV4 (withV6) false
// leaves the IPv4 (IPv6) subnet and gateway to the engine.
func networkCreateOptions(spec runtime.NetworkSpec, withV4, withV6 bool) (client.NetworkCreateOptions, error) {
	driver := spec.Driver
	if driver == "" {
		driver = "bridge"
	}
	var ipam []network.IPAMConfig
	if withV4 && spec.IPv4Subnet != "" {
		c, err := ipamConfig(spec.IPv4Subnet, spec.IPv4Gate)
		if err != nil {
			return client.NetworkCreateOptions{}, err
		}
		ipam = append(ipam, c)
	}
	if withV6 && spec.EnableIPv6 && spec.IPv6Subnet != "" {
		c, err := ipamConfig(spec.IPv6Subnet, spec.IPv6Gate)
		if err != nil {
			return client.NetworkCreateOptions{}, err
		}
		ipam = append(ipam, c)
	}
	options := map[string]string{}
	if driver == "bridge" {
		options["com.docker.network.bridge.default_bridge"] = "false"
		options["com.docker.network.bridge.enable_icc"] = strconv.FormatBool(spec.EnableICC)
		options["com.docker.network.bridge.enable_ip_masquerade"] = "true"
		options["com.docker.network.bridge.host_binding_ipv4"] = "0.0.0.0"
		if spec.BridgeName != "" {
			options["com.docker.network.bridge.name"] = spec.BridgeName
		}
		if spec.HostIPv4 != "" {
			options["com.docker.network.host_ipv4"] = spec.HostIPv4
		}
	}
	if spec.MTU > 0 {
		options["com.docker.network.driver.mtu"] = strconv.Itoa(spec.MTU)
	}
	opts := client.NetworkCreateOptions{
		Driver:   driver,
		Internal: spec.Internal,
		Options:  options,
	}
	if spec.EnableIPv6 {
		v6 := true
		opts.EnableIPv6 = &v6
	}
	if len(ipam) > 0 {
		opts.IPAM = &network.IPAM{Driver: "default", Config: ipam}
	}
	return opts, nil
}

// ipamConfig parses a subnet and an optional gateway; the engine's API
// types hold them parsed.
func ipamConfig(subnet, gateway string) (network.IPAMConfig, error) {
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return network.IPAMConfig{}, fmt.Errorf("subnet %q: %w", subnet, err)
	}
	c := network.IPAMConfig{Subnet: p}
	if gateway != "" {
		if c.Gateway, err = netip.ParseAddr(gateway); err != nil {
			return network.IPAMConfig{}, fmt.Errorf("gateway %q: %w", gateway, err)
		}
	}
	return c, nil
}

// networkInfo reports the driver and the first IPv4 subnet and gateway.
func networkInfo(nw network.Inspect, created bool) runtime.NetworkInfo {
	info := runtime.NetworkInfo{Driver: nw.Driver, Created: created, BridgeName: bridgeName(nw)}
	for _, c := range nw.IPAM.Config {
		if !c.Subnet.IsValid() || !c.Subnet.Addr().Is4() {
			continue
		}
		info.IPv4Subnet = c.Subnet.String()
		if c.Gateway.IsValid() {
			info.IPv4Gate = c.Gateway.String()
		}
		break
	}
	return info
}

// bridgeName is the host interface of a bridge network, as the engine
// names it: the bridge.name option, else "br-" and the first 12 characters
// of the network's id. Empty for other drivers.
func bridgeName(nw network.Inspect) string {
	if nw.Driver != "bridge" {
		return ""
	}
	if name := nw.Options["com.docker.network.bridge.name"]; name != "" {
		return name
	}
	if len(nw.ID) < 12 {
		return ""
	}
	return "br-" + nw.ID[:12]
}

// InspectNetwork reports the network of that name as the engine has it
// (never creating it); runtime.ErrNotFound when it does not exist.
func (r *Runtime) InspectNetwork(ctx context.Context, name string) (runtime.NetworkInfo, error) {
	res, err := r.networkInspect(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return runtime.NetworkInfo{}, runtime.ErrNotFound
	}
	if err != nil {
		return runtime.NetworkInfo{}, wrap("inspect network", name, err)
	}
	return r.networkInfo(ctx, res.Network, false)
}

// networkInspect inspects a network. Podman's compatible inspect lists the
// network's containers and fails when one of them is removed meanwhile
// ("getting container from store …: container not known"): a race with
// another server's removal, not an answer about the network, so it is
// asked again (a few times, at once).
func (r *Runtime) networkInspect(ctx context.Context, name string) (client.NetworkInspectResult, error) {
	for attempt := 1; ; attempt++ {
		res, err := r.cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
		if err == nil || !r.eng.podman() || attempt == 5 || !isPodmanContainerRace(err) {
			return res, err
		}
		r.log.Debug("network inspect raced with a container's removal; asking again", "network", name, "error", err)
	}
}

// isPodmanContainerRace reports Podman's error for a container that
// vanished while a network was being inspected.
func isPodmanContainerRace(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "getting container from store") || strings.Contains(msg, "container not known")
}
