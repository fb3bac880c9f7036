package server

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wharf/wharf/internal/config"
)

// Pelican Wings server/mounts.go: data dir, passwd, group, machine-id.
func TestSystemMountsAndFiles(t *testing.T) {
	node := config.Defaults()
	node.System.RootDirectory = t.TempDir()
	node.System.User.UID, node.System.User.GID = 988, 987
	const id = "0a0a0a0a-0000-4000-8000-00000000000a"
	spec, _ := ServerContainerSpec(Configuration{UUID: id}, node, "/data/"+id)
	var targets []string
	for _, m := range spec.Mounts {
		targets = append(targets, m.Target)
		if m.Target != "/home/container" && !m.ReadOnly {
			t.Errorf("%s is writable", m.Target)
		}
	}
	if len(targets) != 4 || targets[0] != "/home/container" || targets[1] != "/etc/passwd" || targets[2] != "/etc/group" || targets[3] != "/etc/machine-id" {
		t.Fatalf("mounts %v", targets)
	}
	if err := writeSystemFiles(node, id); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		filepath.Join(node.System.RootDirectory, "machine-id", id): "0a0a0a0a00004000800000000000000a",
		filepath.Join(node.System.RootDirectory, "etc", "passwd"):  "container:x:988:987::/home/container:/usr/sbin/nologin\n",
		filepath.Join(node.System.RootDirectory, "etc", "group"):   "container:x:987:container\n",
	} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
	}
	if err := removeMachineID(node, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(node.System.RootDirectory, "machine-id", id)); !os.IsNotExist(err) {
		t.Errorf("machine-id left after delete: %v", err)
	}
	// A backend mount over /etc/machine-id is refused, others kept.
	node.AllowedMounts = []string{"/srv"}
	spec, refused := ServerContainerSpec(Configuration{UUID: id, Mounts: []Mount{
		{Source: "/srv/id", Target: "/etc/machine-id"}, {Source: "/srv/maps", Target: "/maps"},
	}}, node, "/data/"+id)
	if len(spec.Mounts) != 5 || spec.Mounts[4].Target != "/maps" || len(refused) != 1 || refused[0] != "/srv/id" {
		t.Errorf("backend mounts: %+v refused %v", spec.Mounts, refused)
	}
	node.System.User.Passwd.Enable, node.System.MachineID.Enable = false, false
	if spec, _ := ServerContainerSpec(Configuration{UUID: id}, node, "/data/"+id); len(spec.Mounts) != 1 {
		t.Errorf("disabled: mounts %v", spec.Mounts)
	}
}

// Pelican Wings environment/docker/container.go: "ip-" + the address with
// dashes, host_ipv4, only with an allocation.
func TestOutgoingNetwork(t *testing.T) {
	node := config.Defaults()
	var a Allocations
	a.ForceOutgoingIP = true
	a.Default.IP, a.Default.Port = "203.0.113.7", 25565
	nw, ok, why := outgoingNetwork(a, node)
	if !ok || why != "" || nw.Name != "ip-203-0-113-7" || nw.HostIPv4 != "203.0.113.7" || nw.Driver != "bridge" {
		t.Errorf("network %+v %v %q", nw, ok, why)
	}
	for _, bad := range []struct {
		ip   string
		port int
	}{{"203.0.113.7", 0}, {"0.0.0.0", 25565}, {"2001:db8::1", 25565}, {"not an ip", 25565}} {
		a.Default.IP, a.Default.Port = bad.ip, bad.port
		if _, ok, why := outgoingNetwork(a, node); ok || why == "" {
			t.Errorf("%v: applied (%v %q)", bad, ok, why)
		}
	}
	a.ForceOutgoingIP = false
	if _, ok, why := outgoingNetwork(a, node); ok || why != "" {
		t.Errorf("off: %v %q", ok, why)
	}
}
