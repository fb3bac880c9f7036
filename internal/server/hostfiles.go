package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/wharf/wharf/internal/atomicfile"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/runtime"
)

// The files the node writes on the host for a server's container and mounts
// read-only into it, behind Pelican Wings' keys (server/mounts.go there):
// system.user.passwd (/etc/passwd and /etc/group, one pair for the node)
// and system.machine_id (/etc/machine-id, one file per server).

// containerIDs is the uid and gid a server's container runs as.
func containerIDs(node *config.Config) (uid, gid int) {
	u := node.System.User
	if u.Rootless.Enabled {
		return u.Rootless.ContainerUID, u.Rootless.ContainerGID
	}
	return u.UID, u.GID
}

// machineIDPath is the host file mounted as the server's /etc/machine-id.
func machineIDPath(node *config.Config, uuid string) string {
	return filepath.Join(node.System.MachineIDDirectory(), uuid)
}

// machineID is the server's machine id: its uuid without dashes, 32 hex
// digits, byte for byte what Pelican Wings writes (server/server.go
// CreateMachineID there, no newline), so that a node switched either way
// keeps the state games bound to it.
func machineID(uuid string) []byte {
	return []byte(strings.ReplaceAll(uuid, "-", ""))
}

// passwdFiles are /etc/passwd and /etc/group naming the container's user.
func passwdFiles(uid, gid int) (passwd, group []byte) {
	u, g := strconv.Itoa(uid), strconv.Itoa(gid)
	passwd = []byte("container:x:" + u + ":" + g + "::/home/container:/usr/sbin/nologin\n")
	group = []byte("container:x:" + g + ":container\n")
	return passwd, group
}

// systemMounts are the read-only file mounts the node's settings ask for.
func systemMounts(node *config.Config, uuid string) []runtime.Mount {
	var out []runtime.Mount
	if node.System.User.Passwd.Enable {
		dir := node.System.PasswdDirectory()
		out = append(out,
			runtime.Mount{Source: filepath.Join(dir, "passwd"), Target: "/etc/passwd", ReadOnly: true},
			runtime.Mount{Source: filepath.Join(dir, "group"), Target: "/etc/group", ReadOnly: true})
	}
	if node.System.MachineID.Enable {
		out = append(out, runtime.Mount{Source: machineIDPath(node, uuid), Target: "/etc/machine-id", ReadOnly: true})
	}
	return out
}

// writeSystemFiles writes the files systemMounts mounts, before the
// container is created (a bind mount of a missing file would make the
// engine create a directory in its place).
func writeSystemFiles(node *config.Config, uuid string) error {
	if node.System.User.Passwd.Enable {
		dir := node.System.PasswdDirectory()
		passwd, group := passwdFiles(containerIDs(node))
		if err := ensureFile(filepath.Join(dir, "passwd"), passwd); err != nil {
			return err
		}
		if err := ensureFile(filepath.Join(dir, "group"), group); err != nil {
			return err
		}
	}
	if node.System.MachineID.Enable {
		if err := ensureFile(machineIDPath(node, uuid), machineID(uuid)); err != nil {
			return err
		}
	}
	return nil
}

// ensureFile writes data at path atomically unless the file already holds
// exactly that (every start of every server passes here).
func ensureFile(path string, data []byte) error {
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("server: creating %s: %w", filepath.Dir(path), err)
	}
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("server: writing %s: %w", path, err)
	}
	return nil
}

// removeMachineID deletes the server's machine-id file (server deletion).
func removeMachineID(node *config.Config, uuid string) error {
	err := os.Remove(machineIDPath(node, uuid))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// outgoingNetwork is the per-IP network a server with
// allocations.force_outgoing_ip joins instead of the node's network, so that
// its outgoing traffic leaves from its default allocation's address: a
// bridge whose masquerade uses that source address
// (com.docker.network.host_ipv4). Named and created as the Wings family
// does (environment/docker/container.go in Pelican Wings: "ip-" and the
// address with dashes), so that a node switched either way shares them.
// ok is false when the setting is off or cannot apply (no allocation, or
// not a specific IPv4 address: the bridge option is IPv4 only).
func outgoingNetwork(a Allocations, node *config.Config) (spec runtime.NetworkSpec, ok bool, why string) {
	if !a.ForceOutgoingIP {
		return spec, false, ""
	}
	if a.Default.Port == 0 {
		return spec, false, "the server has no allocation"
	}
	ip, err := netip.ParseAddr(a.Default.IP)
	if err != nil || !ip.Is4() || ip.IsUnspecified() {
		return spec, false, fmt.Sprintf("the default allocation's address %q is not a specific IPv4 address", a.Default.IP)
	}
	nw := node.Docker.Network
	return runtime.NetworkSpec{
		Name:      "ip-" + strings.ReplaceAll(ip.String(), ".", "-"),
		Driver:    "bridge",
		EnableICC: nw.EnableICC,
		MTU:       nw.NetworkMTU,
		HostIPv4:  ip.String(),
	}, true, ""
}

// prepareContainer writes the host files the container mounts and joins it
// to its per-IP network when it forces its outgoing address.
func (s *Server) prepareContainer(ctx context.Context, c Configuration, node *config.Config, spec *runtime.ContainerSpec) error {
	if err := writeSystemFiles(node, c.UUID); err != nil {
		return err
	}
	nw, ok, why := outgoingNetwork(c.Allocations, node)
	if why != "" {
		s.log.Warn("cannot force the outgoing IP; the container uses the node's network", "reason", why)
	}
	if !ok {
		return nil
	}
	if _, err := s.deps.Runtime.EnsureNetwork(ctx, nw); err != nil {
		return fmt.Errorf("server: creating the network for the outgoing IP %s: %w", nw.HostIPv4, err)
	}
	spec.Network = nw.Name
	return nil
}
