package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/runtime"
)

func parseConfig(t *testing.T, settings string) Configuration {
	t.Helper()
	d, err := ParseDefinition(json.RawMessage(settings), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	return d.Config
}

func TestEnvironmentVariables(t *testing.T) {
	c := parseConfig(t, `{
		"uuid": "2b4c6d8e-0a1b-4c3d-8e5f-7a9b1c3d5e7f",
		"invocation": "java -Xmx{{SERVER_MEMORY}}M -jar server.jar",
		"allocations": {"default": {"ip": "127.0.0.1", "port": 25565}},
		"build": {"memory_limit": 1024},
		"environment": {
			"server_port_int": 25565, "float_integral": 25565.0, "exp": 1e3, "ratio": 1.5,
			"big": 12345678901234567890, "neg": -3, "flag": true, "text": "hello world",
			"nothing": null, "list": [1, 2], "SERVER_PORT": 1, "tz": "Mars/Olympus", "": "x"
		}
	}`)
	got := EnvironmentVariables(c, "Europe/Paris")
	want := []string{
		"TZ=Europe/Paris",
		"STARTUP=java -Xmx{{SERVER_MEMORY}}M -jar server.jar",
		"SERVER_MEMORY=1024",
		"SERVER_IP=127.0.0.1", // exactly as sent, loopback included
		"SERVER_PORT=25565",
		"BIG=12345678901234567890",
		"EXP=1000",
		"FLAG=true",
		"FLOAT_INTEGRAL=25565",
		"LIST=[1,2]",
		"NEG=-3",
		"NOTHING=",
		"RATIO=1.5",
		"SERVER_PORT_INT=25565",
		"TEXT=hello world",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	for _, e := range got {
		if strings.Contains(e, ".000000") {
			t.Errorf("number rendered with %%f: %s", e)
		}
	}
}

func TestEnvValue(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{json.Number("25565"), "25565"},
		{json.Number("25565.000"), "25565"},
		{json.Number("2.5e1"), "25"},
		{json.Number("0.25"), "0.25"},
		{float64(20), "20"},
		{float64(0.5), "0.5"},
		{"s", "s"},
		{false, "false"},
		{nil, ""},
	}
	for _, tt := range tests {
		if got := envValue(tt.in); got != tt.want {
			t.Errorf("envValue(%#v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestContainerLimits(t *testing.T) {
	d := config.Defaults().Docker
	override := d
	override.Overhead = config.Overhead{Override: true, DefaultMultiplier: 1.05, Multipliers: map[int64]float64{512: 1.5, 4096: 1.2}}
	tests := []struct {
		name   string
		build  Build
		docker config.Docker
		want   runtime.Limits
	}{
		{"unlimited", Build{}, d, runtime.Limits{PidsLimit: 512}},
		{"1 GiB, no swap, one core", Build{MemoryLimit: 1024, CPULimit: 100, IOWeight: 500, Threads: "0-1"}, d, runtime.Limits{
			MemoryBytes: 1234803098, MemoryReservationBytes: 1024 * mib, MemorySwapBytes: 1234803098,
			CPUQuota: 100000, CPUPeriod: 100000, CPUShares: 1024, CpusetCpus: "0-1", IOWeight: 500, PidsLimit: 512,
		}},
		{"unlimited swap", Build{MemoryLimit: 3000, Swap: -1}, d, runtime.Limits{
			MemoryBytes: 3460300800, MemoryReservationBytes: 3000 * mib, MemorySwapBytes: -1, PidsLimit: 512,
		}},
		{"swap added to memory", Build{MemoryLimit: 8192, Swap: 100, OOMDisabled: true}, d, runtime.Limits{
			MemoryBytes: 9019431322, MemoryReservationBytes: 8192 * mib, MemorySwapBytes: 9019431322 + 100*mib, PidsLimit: 512, OOMKillDisable: true,
		}},
		{"override multipliers", Build{MemoryLimit: 256}, override, runtime.Limits{
			MemoryBytes: 384 * mib, MemoryReservationBytes: 256 * mib, MemorySwapBytes: 384 * mib, PidsLimit: 512,
		}},
		{"override default", Build{MemoryLimit: 10000}, override, runtime.Limits{
			MemoryBytes: 11010048000, MemoryReservationBytes: 10000 * mib, MemorySwapBytes: 11010048000, PidsLimit: 512,
		}},
		{"half a core", Build{CPULimit: 50}, d, runtime.Limits{CPUQuota: 50000, CPUPeriod: 100000, CPUShares: 1024, PidsLimit: 512}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ContainerLimits(tt.build, tt.docker)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestPortBindings(t *testing.T) {
	a := Allocations{Mappings: map[string][]int{
		"127.0.0.1": {25565, 0, 70000},
		"10.0.0.2":  {27015},
	}}
	a.Default.IP, a.Default.Port = "127.0.0.1", 25565
	want := []runtime.PortBinding{
		{IP: "10.0.0.2", Port: 27015, Protocol: "tcp"},
		{IP: "10.0.0.2", Port: 27015, Protocol: "udp"},
		{IP: "127.0.0.1", Port: 25565, Protocol: "tcp"},
		{IP: "127.0.0.1", Port: 25565, Protocol: "udp"},
	}
	if diff := cmp.Diff(want, PortBindings(a)); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if got := PortBindings(Allocations{}); len(got) != 0 {
		t.Errorf("no mappings published %v", got)
	}
}

func TestContainerMounts(t *testing.T) {
	c := Configuration{Mounts: []Mount{
		{Source: "/srv/shared/maps", Target: "/maps", ReadOnly: true},
		{Source: "/srv/shared/../secret", Target: "/x"},      // escapes the allowed root
		{Source: "/srv/sharedother", Target: "/y"},           // string prefix only
		{Source: "relative", Target: "/z"},                   // not absolute
		{Source: "/srv/shared/a", Target: "/home/container"}, // over the data directory
		{Source: "/srv/shared/b", Target: "/home/container/b"},
		{Source: "/opt/other", Target: "/o"},
	}}
	mounts, refused := ContainerMounts(c, "/var/lib/service/volumes/u", []string{"/srv/shared", "not/absolute"})
	wantMounts := []runtime.Mount{
		{Source: "/var/lib/service/volumes/u", Target: "/home/container"},
		{Source: "/srv/shared/maps", Target: "/maps", ReadOnly: true},
	}
	if diff := cmp.Diff(wantMounts, mounts); diff != "" {
		t.Errorf("mounts (-want +got)\n%s", diff)
	}
	wantRefused := []string{"/srv/shared/../secret", "/srv/sharedother", "relative", "/srv/shared/a", "/srv/shared/b", "/opt/other"}
	if diff := cmp.Diff(wantRefused, refused); diff != "" {
		t.Errorf("refused (-want +got)\n%s", diff)
	}
	if _, refused := ContainerMounts(c, "/d", nil); len(refused) != len(c.Mounts) {
		t.Errorf("no allowed_mounts: refused %d of %d", len(refused), len(c.Mounts))
	}
}

func TestServerContainerSpec(t *testing.T) {
	node := config.Defaults()
	node.System.User.UID, node.System.User.GID = 988, 988
	node.UUID = "5e0c1d2f-3a4b-4c5d-8e6f-708192a3b4c5"
	c := parseConfig(t, `{"uuid": "2b4c6d8e-0a1b-4c3d-8e5f-7a9b1c3d5e7f", "container": {"image": "~local/img:1"},
		"labels": {"Service": "spoofed", "NodeUUID": "spoofed", "team": "a"}}`)
	spec, _ := ServerContainerSpec(c, node, "/data/u")
	if spec.Name != c.UUID || spec.Hostname != c.UUID || spec.Image != "local/img:1" || spec.User != "988:988" || !spec.Hardened {
		t.Errorf("spec = %+v", spec)
	}
	if spec.Labels["Service"] != "Wharf" || spec.Labels["ContainerType"] != "server_process" || spec.Labels["team"] != "a" ||
		spec.Labels[runtime.NodeLabel] != node.UUID {
		t.Errorf("labels = %v", spec.Labels)
	}
	// Without a node uuid (tests only: the configuration requires one) the
	// backend still cannot name a node.
	if l := ContainerLabels(c, "server_installer", ""); l["ContainerType"] != "server_installer" || l[runtime.NodeLabel] != "" {
		t.Errorf("labels without a node = %v", l)
	}
	if spec.Tmpfs["/tmp"] != "rw,exec,nosuid,size=100M" || spec.Network != node.Docker.Network.Mode {
		t.Errorf("tmpfs %v network %q", spec.Tmpfs, spec.Network)
	}
	// The seccomp lock on project ids comes with system.quotas.
	if spec.QuotaLocked {
		t.Error("quota lock without system.quotas")
	}
	node.System.Quotas.Enabled = true
	if spec, _ := ServerContainerSpec(c, node, "/data/u"); !spec.QuotaLocked {
		t.Error("no quota lock with system.quotas")
	}
}

func TestDockerSignal(t *testing.T) {
	tests := map[string]string{
		"SIGTERM": "SIGTERM", "sigterm": "SIGTERM", "TERM": "SIGTERM", " SIGTERM ": "SIGTERM",
		"SIGINT": "SIGINT", "INT": "SIGINT", "C": "SIGINT", "c": "SIGINT",
		"SIGABRT": "SIGABRT", "abrt": "SIGABRT",
		"SIGKILL": "SIGKILL", "": "SIGKILL", "bogus": "SIGKILL", "SIGSTOP": "SIGKILL",
		"HUP": "SIGHUP", "SIGQUIT": "SIGQUIT", "usr1": "SIGUSR1", "SIGUSR2": "SIGUSR2",
	}
	for in, want := range tests {
		if got := DockerSignal(in); got != want {
			t.Errorf("DockerSignal(%q) = %q, want %q", in, got, want)
		}
	}
}
