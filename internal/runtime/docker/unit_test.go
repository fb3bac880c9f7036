package docker

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"

	"github.com/wharf/wharf/internal/runtime"
)

func TestCPUAbsolute(t *testing.T) {
	sample := func(cur, pre, sys, presys uint64, cpus uint32, percpu int) *container.StatsResponse {
		s := &container.StatsResponse{}
		s.CPUStats.CPUUsage.TotalUsage = cur
		s.PreCPUStats.CPUUsage.TotalUsage = pre
		s.CPUStats.SystemUsage = sys
		s.PreCPUStats.SystemUsage = presys
		s.CPUStats.OnlineCPUs = cpus
		s.CPUStats.CPUUsage.PercpuUsage = make([]uint64, percpu)
		return s
	}
	tests := []struct {
		name string
		s    *container.StatsResponse
		want float64
	}{
		{"one of four cores busy", sample(250, 0, 1000, 0, 4, 0), 100},
		{"two of four cores", sample(1500, 1000, 3000, 2000, 4, 0), 200},
		{"above 100", sample(900, 0, 1000, 0, 4, 0), 360},
		{"rounded to 3 decimals", sample(1, 0, 3000, 0, 1, 0), 0.033},
		{"percpu fallback", sample(500, 0, 1000, 0, 0, 2), 100},
		{"no system delta", sample(500, 0, 1000, 1000, 2, 0), 0},
		{"counter reset", sample(10, 500, 2000, 1000, 2, 0), 0},
		{"idle", sample(500, 500, 2000, 1000, 2, 0), 0},
	}
	for _, tt := range tests {
		if got := cpuAbsolute(tt.s); got != tt.want {
			t.Errorf("%s: cpuAbsolute = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestMemoryUsage(t *testing.T) {
	tests := []struct {
		name  string
		usage uint64
		stats map[string]uint64
		want  uint64
	}{
		{"cgroup v1", 1000, map[string]uint64{"total_inactive_file": 300, "inactive_file": 100}, 700},
		{"cgroup v2", 1000, map[string]uint64{"inactive_file": 400}, 600},
		{"cache larger than usage", 1000, map[string]uint64{"total_inactive_file": 2000}, 1000},
		{"no stats", 1000, nil, 1000},
	}
	for _, tt := range tests {
		m := &container.MemoryStats{Usage: tt.usage, Stats: tt.stats}
		if got := memoryUsage(m); got != tt.want {
			t.Errorf("%s: memoryUsage = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestConvertStatsSumsNetworks(t *testing.T) {
	s := &container.StatsResponse{Networks: map[string]container.NetworkStats{
		"eth0": {RxBytes: 10, TxBytes: 20},
		"eth1": {RxBytes: 1, TxBytes: 2},
	}}
	s.MemoryStats.Limit = 4096
	got := convertStats(s)
	if got.RxBytes != 11 || got.TxBytes != 22 || got.MemoryLimitBytes != 4096 {
		t.Errorf("convertStats = %+v", got)
	}
}

// The engine's block I/O counters, as it sends them on cgroup v1 (per device
// and op, capitalised, with Sync/Async/Total rows that must not be added
// again) and on v2 (lower case, from io.stat).
func TestConvertStatsSumsBlockIO(t *testing.T) {
	for name, raw := range map[string]string{
		"cgroup v1": `{"blkio_stats":{"io_service_bytes_recursive":[
			{"major":8,"minor":0,"op":"Read","value":4096},{"major":8,"minor":0,"op":"Write","value":1048576},
			{"major":8,"minor":0,"op":"Sync","value":1052672},{"major":8,"minor":0,"op":"Async","value":0},
			{"major":8,"minor":0,"op":"Total","value":1052672},
			{"major":8,"minor":16,"op":"Read","value":4096},{"major":8,"minor":16,"op":"Write","value":0}]}}`,
		"cgroup v2": `{"blkio_stats":{"io_service_bytes_recursive":[
			{"major":8,"minor":0,"op":"read","value":4096},{"major":8,"minor":0,"op":"write","value":1048576},
			{"major":8,"minor":16,"op":"read","value":4096},{"major":8,"minor":16,"op":"write","value":0}]}}`,
	} {
		var s container.StatsResponse
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			t.Fatal(err)
		}
		if got := convertStats(&s); got.DiskReadBytes != 8192 || got.DiskWriteBytes != 1048576 {
			t.Errorf("%s: read %d write %d, want 8192 and 1048576", name, got.DiskReadBytes, got.DiskWriteBytes)
		}
	}
}

func TestSignalName(t *testing.T) {
	for in, want := range map[string]string{
		"SIGTERM": "SIGTERM", "sigint": "SIGINT", "ABRT": "SIGABRT", "kill": "SIGKILL", " SIGKILL ": "SIGKILL",
	} {
		if got, err := signalName(in); err != nil || got != want {
			t.Errorf("signalName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	// Wings' truncated names (§14.12) and nonsense are refused, not sent.
	for _, in := range []string{"terminat", "interrupt", "abort", "", "SIGFOO", "9"} {
		if got, err := signalName(in); err == nil {
			t.Errorf("signalName(%q) = %q, want an error", in, got)
		}
	}
}

func TestEncodeAuth(t *testing.T) {
	enc, err := encodeAuth(runtime.RegistryAuth{Username: "user", Password: "p+/?"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.URLEncoding.DecodeString(enc)
	if err != nil {
		t.Fatalf("not base64url: %v", err)
	}
	var got map[string]string
	if err := json.Unmarshal(raw, &got); err != nil || got["username"] != "user" || got["password"] != "p+/?" {
		t.Errorf("decoded %s (%v)", raw, err)
	}
}

func TestContainerConfigDefaults(t *testing.T) {
	cfg, hc, err := containerConfig(runtime.ContainerSpec{
		Name:  "uuid",
		Image: "img",
		Ports: []runtime.PortBinding{
			{IP: "10.0.0.1", Port: 25565, Protocol: "tcp"},
			{IP: "10.0.0.2", Port: 25565, Protocol: "tcp"},
			{IP: "10.0.0.1", Port: 25565, Protocol: "tcp"}, // duplicate
			{IP: "10.0.0.1", Port: 25565},                  // empty = tcp
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Hostname != "uuid" || !cfg.Tty || !cfg.OpenStdin || cfg.StdinOnce {
		t.Errorf("config %+v", cfg)
	}
	if b := hc.PortBindings[network.MustParsePort("25565/tcp")]; len(b) != 2 {
		t.Errorf("bindings = %+v, want two distinct IPs", b)
	}
	if hc.ReadonlyRootfs || len(hc.CapDrop) != 0 || len(hc.SecurityOpt) != 0 {
		t.Error("an unhardened spec got hardening")
	}
	if hc.PidsLimit != nil || hc.LogConfig.Type != "" {
		t.Errorf("unset limits/log config were set: pids %v log %+v", hc.PidsLimit, hc.LogConfig)
	}
	for _, bad := range []runtime.PortBinding{{Port: 0}, {Port: 70000}, {Port: 80, Protocol: "sctp"}, {Port: 80, IP: "not-an-ip"}} {
		if _, _, err := containerConfig(runtime.ContainerSpec{Name: "n", Image: "i", Ports: []runtime.PortBinding{bad}}); err == nil {
			t.Errorf("port %+v accepted", bad)
		}
	}
	// Update leaves unset values alone, including the OOM killer setting.
	res := resources(runtime.Limits{MemoryBytes: 1}, true)
	if res.OomKillDisable != nil || res.PidsLimit != nil {
		t.Errorf("update resources = %+v", res)
	}
}

// An installer gets no-new-privileges and the installer's dropped set: no
// NET_RAW, but the capabilities a package manager run as root needs, and a
// writable root filesystem. Both hardenings at once is a mistake.
func TestContainerConfigHardenedInstaller(t *testing.T) {
	_, hc, err := containerConfig(runtime.ContainerSpec{Name: "u_installer", Image: "img", HardenedInstaller: true})
	if err != nil {
		t.Fatal(err)
	}
	if hc.ReadonlyRootfs || strings.Join(hc.SecurityOpt, ",") != "no-new-privileges" {
		t.Errorf("read-only %v security options %v", hc.ReadonlyRootfs, hc.SecurityOpt)
	}
	dropped := strings.ToLower(strings.Join(hc.CapDrop, ","))
	for _, c := range []string{"net_raw", "mknod", "audit_write", "setpcap", "setfcap", "sys_chroot", "net_bind_service", "sys_ptrace"} {
		if !slices.Contains(hc.CapDrop, c) {
			t.Errorf("installer CapDrop %q lacks %s", dropped, c)
		}
	}
	for _, c := range []string{"chown", "dac_override", "fowner", "fsetid", "setuid", "setgid", "kill"} {
		if slices.Contains(hc.CapDrop, c) {
			t.Errorf("installer CapDrop %q drops %s, which installs need", dropped, c)
		}
	}
	// Every capability the installer drops, the game drops too.
	for _, c := range installerCapDrop {
		if !slices.Contains(hardenedCapDrop, c) {
			t.Errorf("the installer drops %s, the game does not", c)
		}
	}
	spec := runtime.ContainerSpec{Name: "u", Image: "img", HardenedInstaller: true, Hardened: true}
	if _, _, err := containerConfig(spec); err == nil {
		t.Error("a spec hardened both ways was accepted")
	}
	// With the quota lock, the seccomp profile is added after no-new-privileges.
	spec = runtime.ContainerSpec{Name: "u", Image: "img", HardenedInstaller: true, QuotaLocked: true}
	if _, hc, err := containerConfig(spec); err != nil {
		t.Error(err)
	} else if len(hc.SecurityOpt) != 2 || hc.SecurityOpt[0] != "no-new-privileges" {
		t.Errorf("quota-locked installer security options %.80q", hc.SecurityOpt)
	}
}

// The outgoing-IP bridge of a forced outgoing address (Wings' per-IP
// network): host_ipv4 carries the source address; without it, no option.
func TestNetworkCreateOptionsHostIPv4(t *testing.T) {
	opts, err := networkCreateOptions(runtime.NetworkSpec{Name: "ip-203-0-113-7", Driver: "bridge", HostIPv4: "203.0.113.7"}, true, true)
	if err != nil || opts.Options["com.docker.network.host_ipv4"] != "203.0.113.7" || opts.Driver != "bridge" || opts.IPAM != nil {
		t.Errorf("options %+v", opts)
	}
	if opts, _ := networkCreateOptions(runtime.NetworkSpec{Name: "n"}, true, true); opts.Options["com.docker.network.host_ipv4"] != "" {
		t.Error("host_ipv4 set without HostIPv4")
	}
}

// The engine's API types hold subnets and gateways parsed: a malformed one
// is an error here, not a request the engine rejects.
func TestNetworkCreateOptionsParsesAddresses(t *testing.T) {
	opts, err := networkCreateOptions(runtime.NetworkSpec{Name: "n", IPv4Subnet: "172.30.0.0/16", IPv4Gate: "172.30.0.1"}, true, true)
	if err != nil || opts.IPAM == nil || len(opts.IPAM.Config) != 1 ||
		opts.IPAM.Config[0].Subnet.String() != "172.30.0.0/16" || opts.IPAM.Config[0].Gateway.String() != "172.30.0.1" {
		t.Errorf("options %+v, %v", opts.IPAM, err)
	}
	for _, bad := range []runtime.NetworkSpec{
		{Name: "n", IPv4Subnet: "172.30.0.0"},
		{Name: "n", IPv4Subnet: "172.30.0.0/16", IPv4Gate: "gateway"},
		{Name: "n", EnableIPv6: true, IPv6Subnet: "fd00::/64", IPv6Gate: "fd00::zz"},
	} {
		if _, err := networkCreateOptions(bad, true, true); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	// Leaving a subnet to the engine skips its parsing.
	if _, err := networkCreateOptions(runtime.NetworkSpec{Name: "n", IPv4Subnet: "bad"}, false, true); err != nil {
		t.Errorf("withV4=false: %v", err)
	}
}

// DNS servers go to the engine parsed; a malformed one is an error here.
func TestContainerConfigDNS(t *testing.T) {
	_, hc, err := containerConfig(runtime.ContainerSpec{Name: "n", Image: "i", DNS: []string{"1.1.1.1", "2606:4700:4700::1111"}})
	if err != nil || len(hc.DNS) != 2 || hc.DNS[1].String() != "2606:4700:4700::1111" {
		t.Fatalf("DNS %v, %v", hc, err)
	}
	if _, hc, _ := containerConfig(runtime.ContainerSpec{Name: "n", Image: "i"}); hc.DNS != nil {
		t.Errorf("no DNS servers = %v, want nil (the image's resolver)", hc.DNS)
	}
	if _, _, err := containerConfig(runtime.ContainerSpec{Name: "n", Image: "i", DNS: []string{"dns.example"}}); err == nil {
		t.Error("a host name as DNS server: no error")
	}
}
