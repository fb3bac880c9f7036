package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// buildNetprobe compiles internal/testutil/netprobe statically into a
// temporary directory and returns its path.
func buildNetprobe(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "netprobe")
	build := exec.Command("go", "build", "-o", bin, "github.com/wharf/wharf/internal/testutil/netprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build netprobe: %v\n%s", err, out)
	}
	return bin
}

// endpoint is a container's address on one network, as the engine reports it.
type endpoint struct {
	pid     int
	ip, mac string
	gateway string
}

func containerEndpoint(t *testing.T, cli *client.Client, name, network string) endpoint {
	t.Helper()
	info, err := engineInspect(context.Background(), cli, name)
	if err != nil {
		t.Fatal(err)
	}
	ep := info.NetworkSettings.Networks[network]
	if ep == nil || info.State == nil || info.State.Pid == 0 {
		t.Fatalf("container %s is not running on network %s", name, network)
	}
	return endpoint{pid: info.State.Pid, ip: ep.IPAddress.String(), mac: net.HardwareAddr(ep.MacAddress).String(), gateway: ep.Gateway.String()}
}

// neighbourMAC is the link-layer address the container's network namespace
// holds for ip ("" when it holds none), read on the host.
func neighbourMAC(t *testing.T, pid int, ip string) string {
	t.Helper()
	out, err := exec.Command("nsenter", "-t", fmt.Sprint(pid), "-n", "ip", "neigh", "show", ip).CombinedOutput()
	if err != nil {
		t.Fatalf("reading the neighbour table of %d: %v\n%s", pid, err, out)
	}
	f := strings.Fields(string(out))
	for i := range f {
		if f[i] == "lladdr" && i+1 < len(f) {
			return strings.ToLower(f[i+1])
		}
	}
	return ""
}

// learnGateway makes the container resolve its gateway, as any reply to the
// host does: the host connects to a closed port of the container, the
// container answers with a reset, through the gateway's MAC.
func learnGateway(t *testing.T, ep endpoint, gatewayMAC string) {
	t.Helper()
	wait.For(t, 20*time.Second, func() bool {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(ep.ip, "1"), 2*time.Second); err == nil {
			c.Close()
		}
		return neighbourMAC(t, ep.pid, ep.gateway) == gatewayMAC
	}, "the container at %s to learn its gateway %s at %s", ep.ip, ep.gateway, gatewayMAC)
}

func bridgeMAC(t *testing.T, bridge string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/class/net", bridge, "address"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.ToLower(strings.TrimSpace(string(b)))
}

// TestInstallerCannotSpoofANeighboursGateway: an owner's install script
// (the hook of an npm or pip install) runs a static binary the owner
// uploaded through the file manager. It tries the sockets that need
// CAP_NET_RAW and, with a packet socket, would send the running neighbour
// B unicast ARP replies claiming the gateway's address for itself. On
// Wharf every such socket fails with EPERM (the install log says so), B's
// neighbour table still maps the gateway to the bridge's MAC, and the
// daemon and B's console keep answering. The same script then forks until
// the installer's PID limit (512) stops it.
//
// Control: the same binary in a plain container (the engine's default
// capabilities) on a network of the test's own opens the packet socket and
// poisons its neighbour's entry for the gateway, so the probe works.
func TestInstallerCannotSpoofANeighboursGateway(t *testing.T) {
	parallelDocker(t)
	probe := buildNetprobe(t)
	img := testimages.Busybox(context.Background(), t)
	cli := testimages.Client(t)

	t.Run("control: a container with the engine's default capabilities", func(t *testing.T) {
		spoofOnPlainNetwork(t, cli, img, probe)
	})
	if t.Failed() {
		t.FailNow()
	}

	a, b := newGameServer(t), newGameServer(t)
	a.InstallScript = &devpanel.InstallScript{ContainerImage: "~" + testimages.BusyboxTag, Entrypoint: "sh", Script: installerAttackScript}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{a, b}})
	n.startRunning(b)
	n.waitLog(b.UUID, "Done (")
	nw := n.Config.Docker.Network
	gwMAC := bridgeMAC(t, nw.BridgeName)
	victim := containerEndpoint(t, cli, b.UUID, nw.Name)
	learnGateway(t, victim, gwMAC)

	// The owner uploads the binary and its arguments as any file.
	bin, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	upload := func(name string, body []byte) {
		res, out := n.request("POST", "/api/servers/"+a.UUID+"/files/write?file="+q("/"+name), body, "")
		if res.StatusCode != 204 && res.StatusCode != 200 {
			t.Fatalf("writing %s: %d %s", name, res.StatusCode, out)
		}
	}
	upload("netprobe", bin)
	upload("target", fmt.Appendf(nil, "eth0 %s %s %s 30\n", victim.ip, victim.mac, victim.gateway))

	if res, body := n.request("POST", "/api/servers/"+a.UUID+"/install", nil, ""); res.StatusCode != 202 {
		t.Fatalf("install: %d %s", res.StatusCode, body)
	}
	if ok, _ := installStatus(t, n, a.UUID); !ok {
		t.Errorf("the install script failed\n%s", n.log)
	}
	log, err := os.ReadFile(filepath.Join(n.Config.System.LogDirectory, "install", a.UUID+".log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PACKET_RAW errno=1", "PACKET_DGRAM errno=1", "INET_RAW errno=1", "INET6_RAW errno=1", "probe exit 0"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the install log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(string(log), "ARP sent") {
		t.Errorf("the installer sent ARP replies:\n%s", log)
	}
	if got := neighbourMAC(t, victim.pid, victim.gateway); got != gwMAC {
		t.Errorf("B's neighbour entry for the gateway %s is %q, want the bridge's %s", victim.gateway, got, gwMAC)
	}
	// The fork bomb ran into the PID limit: at most 512 processes at once,
	// and at least 400 (it did fork).
	var procs int
	if _, err := fmt.Sscanf(afterLine(string(log), "processes "), "%d", &procs); err != nil || procs > 512 || procs < 400 {
		t.Errorf("the fork bomb peaked at %d processes (%v), want 400-512:\n%s", procs, err, log)
	}

	n.assertAnswersEveryFace(t, b.UUID)
	n.command(b.UUID, "echo neighbour-still-answers")
	n.waitLog(b.UUID, "neighbour-still-answers")
	n.power(b.UUID, "kill")
	n.waitState(b.UUID, "offline", 60*time.Second)
}

// installerAttackScript runs the uploaded probe against its target, then
// forks sleepers until fork fails (in a subshell: ash exits on a failed
// fork), counts the processes without forking and kills them.
const installerAttackScript = `chmod 755 /mnt/server/netprobe
/mnt/server/netprobe $(cat /mnt/server/target)
echo "probe exit $?"
( while true; do sleep 300 & done ) 2>/dev/null
n=0; for p in /proc/[0-9]*; do n=$((n+1)); done
echo "processes $n"
kill -9 -1
exit 0
`

// afterLine returns what follows prefix on the first line that starts with it.
func afterLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), prefix); ok {
			return rest
		}
	}
	return ""
}

// spoofOnPlainNetwork runs the probe as a plain `docker run` would, on a
// bridge network of its own next to a victim container, and waits until
// the victim's entry for its gateway holds the attacker's MAC.
func spoofOnPlainNetwork(t *testing.T, cli *client.Client, img, probe string) {
	ctx := context.Background()
	id := uuid.NewString()[:8]
	netName, victimName, attackerName := "wharf-e2e-arp-"+id, "wharf-e2e-arp-victim-"+id, "wharf-e2e-arp-attacker-"+id
	created, err := cli.NetworkCreate(ctx, netName, client.NetworkCreateOptions{Driver: "bridge"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range []string{attackerName, victimName} {
			_, _ = cli.ContainerRemove(context.Background(), c, containerRemoveForce)
		}
		if _, err := cli.NetworkRemove(context.Background(), netName, client.NetworkRemoveOptions{}); err != nil {
			t.Errorf("removing network %s: %v", netName, err)
		}
	})
	run := func(name string, entrypoint, cmd []string, mounts []mount.Mount) {
		t.Helper()
		c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name,
			Config:     &container.Config{Image: img, Entrypoint: entrypoint, Cmd: cmd, Labels: map[string]string{"wharf-test": "1"}},
			HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode(netName), Mounts: mounts},
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run(victimName, []string{"sleep"}, []string{"600"}, nil)
	victim := containerEndpoint(t, cli, victimName, netName)
	gwMAC := bridgeMAC(t, "br-"+created.ID[:12])
	learnGateway(t, victim, gwMAC)

	run(attackerName, []string{"/probe/netprobe"}, []string{"eth0", victim.ip, victim.mac, victim.gateway, "150"},
		[]mount.Mount{{Type: mount.TypeBind, Source: filepath.Dir(probe), Target: "/probe", ReadOnly: true}})
	attacker := containerEndpoint(t, cli, attackerName, netName)
	if !wait.Until(15*time.Second, func() bool { return neighbourMAC(t, victim.pid, victim.gateway) == attacker.mac }) {
		t.Fatalf("the victim's entry for the gateway %s holds %s, never the attacker's %s: the probe does not spoof",
			victim.gateway, neighbourMAC(t, victim.pid, victim.gateway), attacker.mac)
	}
}

// TestInstallerKeepsTheUsualTools: hardened, an install script still does
// what eggs do as root: writes into and chowns inside the server's
// directory whose files belong to another user (dac_override, chown),
// sets a set-group-id mode on a file it does not own and keeps the bit
// (fowner, fsetid), downloads with wget from an HTTP server (the test's,
// on the node's gateway address), drops to an unprivileged user with su
// (setuid, setgid), writes into its own root filesystem (/etc/passwd) and
// installs a package with dpkg (busybox's dpkg -i of a .deb built here
// with dpkg-deb). The image is the test busybox: it has no curl and no apt.
func TestInstallerKeepsTheUsualTools(t *testing.T) {
	parallelDocker(t)
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Fatal("dpkg-deb (package dpkg) is needed to build the test's .deb")
	}
	testimages.Busybox(context.Background(), t)
	s := newGameServer(t)
	s.InstallScript = &devpanel.InstallScript{ContainerImage: "~" + testimages.BusyboxTag, Entrypoint: "sh", Script: usualToolsScript}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	dir := n.serverDir(s.UUID)

	// What the game left: a directory and a file of the game's user.
	mustWrite(t, filepath.Join(dir, "owned", "f"), "f", 0o644)
	for _, p := range []string{"owned", "owned/f"} {
		if err := os.Chown(filepath.Join(dir, p), 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "owned"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A download server on the node's gateway address.
	ln, err := net.Listen("tcp", net.JoinHostPort(n.Config.Docker.Network.Interfaces.V4.Gateway, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "downloaded-by-wget\n")
	})}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-served })
	mustWrite(t, filepath.Join(dir, "url"), "http://"+ln.Addr().String()+"/file", 0o644)
	mustWrite(t, filepath.Join(dir, "tiny.deb"), string(tinyDeb(t)), 0o644)

	if res, body := n.request("POST", "/api/servers/"+s.UUID+"/install", nil, ""); res.StatusCode != 202 {
		t.Fatalf("install: %d %s", res.StatusCode, body)
	}
	ok, _ := installStatus(t, n, s.UUID)
	log, err := os.ReadFile(filepath.Join(n.Config.System.LogDirectory, "install", s.UUID+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("the install failed:\n%s", log)
	}
	for _, want := range []string{"mode 2755", "su 1000:1000", "by-steam 1000:1000", "dpkg hello-from-deb", "installed ok"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the install log lacks %q:\n%s", want, log)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "owned", "new"), &st); err != nil || st.Uid != 1001 || st.Gid != 1001 {
		t.Errorf("owned/new: owner %d:%d (%v), want 1001:1001", st.Uid, st.Gid, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "downloaded.txt")); err != nil || string(b) != "downloaded-by-wget\n" {
		t.Errorf("the download: %q %v", b, err)
	}
}

// usualToolsScript fails (set -e) at the first step that does not work.
const usualToolsScript = `set -e
cd /mnt/server
echo new > owned/new
chown 1001:1001 owned/new
chmod 2755 owned/f
echo "mode $(stat -c %a owned/f)"
wget -q -O downloaded.txt "$(cat url)"
mkdir -p /etc
printf 'root:x:0:0:root:/root:/bin/sh\nsteam:x:1000:1000:steam:/mnt/server:/bin/sh\n' > /etc/passwd
printf 'root:x:0:\nsteam:x:1000:\n' > /etc/group
su -s /bin/sh steam -c 'echo "su $(id -u):$(id -g)"; echo steam > /tmp/by-steam'
echo "by-steam $(stat -c %u:%g /tmp/by-steam)"
mkdir -p /var/lib/dpkg/info
touch /var/lib/dpkg/status
dpkg -i /mnt/server/tiny.deb
echo "dpkg $(cat /usr/share/wharf-tiny/hello.txt)"
echo "installed ok"
`

// tinyDeb builds a one-file .deb (gzip members, which busybox's dpkg reads).
func tinyDeb(t *testing.T) []byte {
	t.Helper()
	root := filepath.Join(t.TempDir(), "pkg")
	mustWrite(t, filepath.Join(root, "DEBIAN", "control"), "Package: wharf-tiny\nVersion: 1.0\nArchitecture: all\nMaintainer: Wharf tests <tests@wharf.invalid>\nDescription: one file\n", 0o644)
	mustWrite(t, filepath.Join(root, "usr", "share", "wharf-tiny", "hello.txt"), "hello-from-deb\n", 0o644)
	deb := root + ".deb"
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, out)
	}
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
