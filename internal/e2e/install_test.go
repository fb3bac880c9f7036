package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/moby/moby/api/types/container"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

func installStatus(t *testing.T, n *node, id string) (successful, reinstall bool) {
	t.Helper()
	c, ok := n.Panel.WaitForCall("POST", "/servers/"+id+"/install", 90*time.Second)
	if !ok {
		t.Fatalf("the install status was never reported\n%s", n.log)
	}
	var body struct{ Successful, Reinstall bool }
	if err := json.Unmarshal(c.Body, &body); err != nil {
		t.Fatal(err)
	}
	return body.Successful, body.Reinstall
}

// A successful install: the installer container's shape while it runs, the
// files it wrote, the status reported, the log written, nothing left in the
// tmp directory and no installer container afterwards.
func TestInstallSuccess(t *testing.T) {
	parallelDocker(t)
	s := newGameServer(t)
	testimages.Busybox(context.Background(), t)
	s.Settings["build"] = map[string]any{"memory_limit": 2048, "cpu_limit": 50}
	s.InstallScript = &devpanel.InstallScript{
		ContainerImage: "~" + testimages.BusyboxTag, Entrypoint: "sh",
		Script: "echo installing $MAX_PLAYERS\r\necho done > /mnt/server/installed.txt\r\nsleep 3\r\n",
	}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	if res, body := n.request("POST", "/api/servers/"+s.UUID+"/install", nil, ""); res.StatusCode != 202 {
		t.Fatalf("install: %d %s", res.StatusCode, body)
	}

	cli := testimages.Client(t)
	var seen bool
	var info container.InspectResponse
	seen = wait.Until(30*time.Second, func() bool {
		var err error
		info, err = engineInspect(context.Background(), cli, s.UUID+"_installer")
		return err == nil
	})
	if seen {
		hc := info.HostConfig
		if hc.Privileged || info.Config.User != "" {
			t.Errorf("installer privileged %v user %q", hc.Privileged, info.Config.User)
		}
		if hc.PidsLimit == nil || *hc.PidsLimit <= 0 {
			t.Errorf("installer pids limit %v", hc.PidsLimit)
		}
		// Hardened as an installer (what that stops and keeps working:
		// installer_attacks_test.go): no raw sockets, no new privileges,
		// a writable root filesystem for the packages it installs.
		if !slices.Contains(hc.SecurityOpt, "no-new-privileges") || !slices.ContainsFunc(hc.CapDrop, func(c string) bool {
			return strings.EqualFold(strings.TrimPrefix(strings.ToUpper(c), "CAP_"), "net_raw")
		}) || hc.ReadonlyRootfs {
			t.Errorf("installer security options %v, dropped capabilities %v, read-only root %v", hc.SecurityOpt, hc.CapDrop, hc.ReadonlyRootfs)
		}
		// The higher of installer_limits (1024 MB, 100%) and the server's (2048 MB, 50%).
		if hc.Memory < 2048<<20 || hc.CPUQuota != 100000 {
			t.Errorf("installer memory %d cpu quota %d", hc.Memory, hc.CPUQuota)
		}
		var dests []string
		for _, m := range info.Mounts {
			dests = append(dests, m.Destination)
			if strings.Contains(m.Source, "docker.sock") {
				t.Errorf("docker socket mounted: %+v", m)
			}
		}
		if strings.Join(dests, ",") != "/mnt/install,/mnt/server" && strings.Join(dests, ",") != "/mnt/server,/mnt/install" {
			t.Errorf("installer mounts %v", dests)
		}
	}
	if !seen {
		t.Fatal("never saw the installer container")
	}

	if ok, re := installStatus(t, n, s.UUID); !ok || re {
		t.Fatalf("install reported successful=%v reinstall=%v", ok, re)
	}
	data, err := os.ReadFile(filepath.Join(n.Config.System.Data, s.UUID, "installed.txt"))
	if err != nil || strings.TrimSpace(string(data)) != "done" {
		t.Fatalf("installed file: %q %v", data, err)
	}
	log, err := os.ReadFile(filepath.Join(n.Config.System.LogDirectory, "install", s.UUID+".log"))
	if err != nil || !strings.Contains(string(log), "installing 20") {
		t.Fatalf("install log: %v\n%s", err, log)
	}
	if entries, err := os.ReadDir(n.Config.System.TmpDirectory); err != nil || len(entries) != 0 {
		t.Fatalf("tmp directory after install: %v %v", entries, err)
	}
	wait.For(t, 10*time.Second, func() bool {
		_, err := engineInspect(context.Background(), cli, s.UUID+"_installer")
		return err != nil
	}, "the installer container to be removed")

	// Reinstall keeps the files.
	if err := os.WriteFile(filepath.Join(n.Config.System.Data, s.UUID, "world.dat"), []byte("w"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.Panel.UpdateSettings(s.UUID, "environment", map[string]any{"MAX_PLAYERS": 30})
	calls := len(n.Panel.CallsTo("POST", "/servers/"+s.UUID+"/install"))
	if res, _ := n.request("POST", "/api/servers/"+s.UUID+"/reinstall", nil, ""); res.StatusCode != 202 {
		t.Fatalf("reinstall: %d", res.StatusCode)
	}
	wait.For(t, 90*time.Second, func() bool { return len(n.Panel.CallsTo("POST", "/servers/"+s.UUID+"/install")) > calls }, "the reinstall to be reported")
	last := n.Panel.CallsTo("POST", "/servers/"+s.UUID+"/install")[calls]
	if !strings.Contains(string(last.Body), `"successful":true`) || !strings.Contains(string(last.Body), `"reinstall":true`) {
		t.Fatalf("reinstall status %s", last.Body)
	}
	if _, err := os.Stat(filepath.Join(n.Config.System.Data, s.UUID, "world.dat")); err != nil {
		t.Fatalf("reinstall lost a file: %v", err)
	}
}

// A script that exits non-zero is reported as unsuccessful.
func TestInstallFailureReported(t *testing.T) {
	parallelDocker(t)
	s := newGameServer(t)
	testimages.Busybox(context.Background(), t)
	s.InstallScript = &devpanel.InstallScript{ContainerImage: "~" + testimages.BusyboxTag, Entrypoint: "sh", Script: "echo about to fail\nexit 3\n"}
	n := startNode(t, nodeOptions{servers: []devpanel.Server{s}})
	if res, _ := n.request("POST", "/api/servers/"+s.UUID+"/install", nil, ""); res.StatusCode != 202 {
		t.Fatalf("install: %d", res.StatusCode)
	}
	if ok, _ := installStatus(t, n, s.UUID); ok {
		t.Fatal("a failed script was reported successful")
	}
	log, err := os.ReadFile(filepath.Join(n.Config.System.LogDirectory, "install", s.UUID+".log"))
	if err != nil || !strings.Contains(string(log), "about to fail") || !strings.Contains(string(log), "Exit code: 3") {
		t.Fatalf("install log: %v\n%s", err, log)
	}
	if entries, _ := os.ReadDir(n.Config.System.TmpDirectory); len(entries) != 0 {
		t.Fatalf("tmp directory after a failed install: %v", entries)
	}
}

// POST /api/servers creates the server, installs it and starts it.
func TestCreateServerInstallsAndStarts(t *testing.T) {
	parallelDocker(t)
	testimages.RequireDocker(t)
	testimages.Busybox(context.Background(), t)
	n := startNode(t, nodeOptions{})
	s := newGameServer(t)
	s.InstallScript = &devpanel.InstallScript{ContainerImage: "~" + testimages.BusyboxTag, Entrypoint: "sh", Script: "echo ok > /mnt/server/ok\n"}
	n.Panel.PutServer(s)

	if res, body := n.request("POST", "/api/servers", map[string]any{"uuid": s.UUID, "start_on_completion": true}, ""); res.StatusCode != 202 {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	if res, _ := n.request("POST", "/api/servers", map[string]any{"uuid": s.UUID}, ""); res.StatusCode != 409 {
		t.Fatalf("create twice: %d", res.StatusCode)
	}
	if res, _ := n.request("POST", "/api/servers", map[string]any{"uuid": "not-a-uuid"}, ""); res.StatusCode != 422 {
		t.Fatalf("create with a bad uuid: %d", res.StatusCode)
	}
	if res, _ := n.request("POST", "/api/servers", map[string]any{"uuid": uuid.NewString()}, ""); res.StatusCode != 404 {
		t.Fatalf("create of a server unknown to the backend: %d", res.StatusCode)
	}
	if ok, _ := installStatus(t, n, s.UUID); !ok {
		t.Fatal("install failed")
	}
	n.waitState(s.UUID, "running", 60*time.Second)
	n.waitLog(s.UUID, "Done (")
	if _, err := os.Stat(filepath.Join(n.Config.System.Data, s.UUID, "ok")); err != nil {
		t.Fatal(err)
	}
	n.power(s.UUID, "kill")
	n.waitState(s.UUID, "offline", 60*time.Second)
}
