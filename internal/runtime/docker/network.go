package docker

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"

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
	if nw, err := r.cli.NetworkInspect(ctx, spec.Name, network.InspectOptions{}); err == nil {
		return networkInfo(nw, false), nil
	} else if !cerrdefs.IsNotFound(err) {
		return runtime.NetworkInfo{}, wrap("inspect network", spec.Name, err)
	}

	opts := networkCreateOptions(spec, true, true)
	_, err := r.cli.NetworkCreate(ctx, spec.Name, opts)
	if err != nil && spec.IPv4Subnet != "" && isPoolOverlap(err) {
		r.log.Warn("network subnet overlaps an existing network; letting the engine choose one",
			"network", spec.Name, "subnet", spec.IPv4Subnet, "error", err)
		_, err = r.cli.NetworkCreate(ctx, spec.Name, networkCreateOptions(spec, false, true))
	}
	if err != nil && spec.EnableIPv6 && spec.IPv6Subnet != "" && isPoolOverlap(err) {
		// The IPv6 subnet overlaps too (another node's network on the same
		// engine): let the engine choose that one as well.
		r.log.Warn("network IPv6 subnet overlaps an existing network; letting the engine choose one",
			"network", spec.Name, "subnet", spec.IPv6Subnet, "error", err)
		_, err = r.cli.NetworkCreate(ctx, spec.Name, networkCreateOptions(spec, false, false))
		if err != nil && !cerrdefs.IsConflict(err) {
			r.log.Warn("the engine cannot choose an IPv6 subnet; creating the network without IPv6",
				"network", spec.Name, "error", err)
			noV6 := spec
			noV6.EnableIPv6 = false
			_, err = r.cli.NetworkCreate(ctx, spec.Name, networkCreateOptions(noV6, false, false))
		}
	}
	created := err == nil
	if err != nil && !cerrdefs.IsConflict(err) && !strings.Contains(err.Error(), "already exists") {
		return runtime.NetworkInfo{}, wrap("create network", spec.Name, err)
	}
	// Re-inspect: report what the engine actually has, not the request (a
	// network created concurrently by someone else counts as existing).
	nw, err := r.cli.NetworkInspect(ctx, spec.Name, network.InspectOptions{})
	if err != nil {
		return runtime.NetworkInfo{}, wrap("inspect network", spec.Name, err)
	}
	return networkInfo(nw, created), nil
}

// isPoolOverlap reports whether a network creation failed because the
// requested address pool is already in use.
func isPoolOverlap(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "overlap") || strings.Contains(msg, "pool") && strings.Contains(msg, "in use")
}

// networkCreateOptions builds the create request; withV4 (withV6) false
// leaves the IPv4 (IPv6) subnet and gateway to the engine.
func networkCreateOptions(spec runtime.NetworkSpec, withV4, withV6 bool) network.CreateOptions {
	driver := spec.Driver
	if driver == "" {
		driver = "bridge"
	}
	var ipam []network.IPAMConfig
	if withV4 && spec.IPv4Subnet != "" {
		ipam = append(ipam, network.IPAMConfig{Subnet: spec.IPv4Subnet, Gateway: spec.IPv4Gate})
	}
	if withV6 && spec.EnableIPv6 && spec.IPv6Subnet != "" {
		ipam = append(ipam, network.IPAMConfig{Subnet: spec.IPv6Subnet, Gateway: spec.IPv6Gate})
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
	opts := network.CreateOptions{
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
	return opts
}

// networkInfo reports the driver and the first IPv4 subnet and gateway.
func networkInfo(nw network.Inspect, created bool) runtime.NetworkInfo {
	info := runtime.NetworkInfo{Driver: nw.Driver, Created: created}
	for _, c := range nw.IPAM.Config {
		p, err := netip.ParsePrefix(c.Subnet)
		if err != nil || !p.Addr().Is4() {
			continue
		}
		info.IPv4Subnet = c.Subnet
		info.IPv4Gate = c.Gateway
		break
	}
	return info
}
