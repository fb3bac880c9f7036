package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/testimages"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// liveNodes turns live transfers on for both nodes; the target writes at
// most limit MiB/s so that each phase lasts long enough to act in (what
// the source has sent but the target not yet read, several MiB, sits in
// buffers: the trees are larger than that).
func liveNodes(limit int) func(string, *config.Config) {
	return func(name string, c *config.Config) {
		c.System.Transfers.Live = true
		if name == "target" {
			c.System.Transfers.DownloadLimit = limit
		}
	}
}

// changeWhileOnline changes the tree as a running game server would: a
// file rewritten, one grown, one created in a new directory, a link and an
// empty directory made, a file and a directory deleted, a mode changed.
func changeWhileOnline(t *testing.T, dir string) {
	t.Helper()
	var files []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) < 4 {
		t.Fatalf("tree too small: %d files", len(files))
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(files[0], []byte("rewritten while online\n"), 0o644))
	f, err := os.OpenFile(files[1], os.O_APPEND|os.O_WRONLY, 0)
	must(err)
	_, err = f.WriteString(strings.Repeat("appended\n", 1000))
	must(err)
	must(f.Close())
	must(os.Remove(files[2]))
	must(os.Chmod(files[3], 0o600))
	must(os.MkdirAll(filepath.Join(dir, "world", "region-new"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "world", "region-new", "r.0.0.mca"), []byte(strings.Repeat("chunk", 5000)), 0o644))
	must(os.Mkdir(filepath.Join(dir, "empty-new"), 0o750))
	must(os.Symlink("world/region-new/r.0.0.mca", filepath.Join(dir, "latest-region")))
	entries, err := os.ReadDir(dir)
	must(err)
	for _, e := range entries {
		if e.IsDir() && e.Name() != "world" && e.Name() != "empty-new" {
			must(os.RemoveAll(filepath.Join(dir, e.Name())))
			break
		}
	}
}

// While phase 1 streams, the server runs and its files change; the target
// ends with the tree as it was when the server stopped.
func TestLiveTransferKeepsServerOnline(t *testing.T) {
	t.Parallel() // own server UUID and nodes; mostly a throttled wait
	id := processID("7b000001-0000-4000-8000-000000000001")
	const scrapeToken = "e2e-live-scrape-token-0123456789"
	metricsPort := freePort(t)
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, func(name string, cfg *config.Config) {
		liveNodes(4)(name, cfg)
		if name == "target" {
			cfg.Metrics = config.Metrics{BindAddress: fmt.Sprintf("127.0.0.1:%d", metricsPort), Token: scrapeToken}
		}
	})
	fill(t, c.Source, id, 48<<20)
	c.Source.power(id, "start")
	c.Source.waitLog(id, "Done (")

	c.startTransfer(id)
	c.Target.waitDaemonLog(`msg="live transfer pass" server=`+id+` direction=incoming pass=1 phase=1`, 20*time.Second)
	changeWhileOnline(t, c.Source.dataDir(id))
	// The server runs until the source stops it for the final pass. The
	// source announces the stop, then stops; the announcement reaches the
	// daemon's log through an event subscriber, which may lag a little
	// behind the state: a server seen stopping must have been announced
	// within a moment.
	const stopMsg = "Stopping the server to send the last changes"
	announced := func() bool { return strings.Contains(c.Source.log.String(), stopMsg) }
	wait.For(t, 10*time.Minute, func() bool {
		if announced() {
			return true
		}
		if st := c.Source.details(id)["state"]; st != "running" && !wait.Until(2*time.Second, announced) {
			t.Fatalf("server %v during phase 1\n%s", st, c.Source.log)
		}
		return false
	}, "the source to announce the stop for the final pass")
	c.waitReports(c.Target, id, []string{"success"}, 60*time.Second)
	c.Source.waitDaemonLog(`server=`+id+` direction=outgoing status=completed`, 30*time.Second)
	c.Source.waitDaemonLog(`msg="transfer completed" server=`+id+` direction=outgoing live=true offline=`, 10*time.Second)

	// Nothing wrote after the stop: the source's tree is the one at the stop.
	if diff := cmp.Diff(snap(t, c.Source.dataDir(id)), snap(t, c.Target.dataDir(id))); diff != "" {
		t.Fatalf("tree differs (-source +target):\n%s", diff)
	}
	if _, err := os.Lstat(filepath.Join(c.Target.dataDir(id), "latest-region")); err != nil {
		t.Fatalf("the link made during phase 1 did not arrive: %v", err)
	}
	if got, want := c.Source.statuses(id), []string{"pending", "processing", "completed"}; !slices.Equal(got, want) {
		t.Fatalf("source statuses %v, want %v", got, want)
	}
	if got, want := c.Target.statuses(id), []string{"pending", "processing", "completed"}; !slices.Equal(got, want) {
		t.Fatalf("target statuses %v, want %v", got, want)
	}
	if got := c.reports(c.Source, id); len(got) != 0 {
		t.Fatalf("the source reported %v", got)
	}
	ci, err := engineInspect(context.Background(), testimages.Client(t), id)
	if err != nil || ci.Config.Labels["NodeUUID"] != c.Target.Config.UUID {
		t.Fatalf("target container: %v", err)
	}
	if !strings.Contains(c.Source.log.String(), "(phase 1, pass 1: the server is online)") {
		t.Errorf("no progress naming phase 1 in\n%s", c.Source.log)
	}
	// The target counts what it received.
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort), nil)
	req.Header.Set("Authorization", "Bearer "+scrapeToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := regexp.MustCompile(`(?m)^wharf_job_bytes_total\{kind="transfer_in",result="success"\} (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no transfer_in bytes in the target's metrics:\n%s", body)
	}
	var treeBytes int64
	_ = filepath.WalkDir(c.Target.dataDir(id), func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				treeBytes += fi.Size()
			}
		}
		return nil
	})
	if n, _ := strconv.ParseFloat(string(m[1]), 64); n < float64(treeBytes)*9/10 {
		t.Errorf("transfer_in bytes = %v, want about the received tree's %d", n, treeBytes)
	}
	c.Target.assertUsable(id)
}

// A target with live transfers off gets the classic transfer; so does a
// target with them on from a source with them off.
func TestLiveTransferFallsBackToClassic(t *testing.T) {
	for _, tc := range []struct {
		name, id string
		live     []string
	}{
		{"target off", processID("7b000002-0000-4000-8000-000000000002"), []string{"source"}},
		{"classic source", processID("7b000003-0000-4000-8000-000000000003"), []string{"target"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := tc.id
			c := startCluster(t, []devpanel.Server{transferServer(t, id)}, func(name string, cfg *config.Config) {
				cfg.System.Transfers.Live = slices.Contains(tc.live, name)
			})
			fill(t, c.Source, id, 2<<20)
			want := snap(t, c.Source.dataDir(id))
			c.Source.power(id, "start")
			c.Source.waitLog(id, "Done (")
			c.startTransfer(id)
			c.waitReports(c.Target, id, []string{"success"}, 60*time.Second)
			c.Source.waitDaemonLog(`server=`+id+` direction=outgoing status=completed`, 30*time.Second)
			if diff := cmp.Diff(want, snap(t, c.Target.dataDir(id))); diff != "" {
				t.Fatalf("tree differs (-source +target):\n%s", diff)
			}
			if strings.Contains(c.Target.log.String(), "live transfer pass") || strings.Contains(c.Source.log.String(), "live=true") {
				t.Fatalf("a live transfer ran\nSOURCE:\n%s\nTARGET:\n%s", c.Source.log, c.Target.log)
			}
			if tc.name == "target off" {
				c.Source.waitDaemonLog(`the target does not speak live transfers: classic transfer`, time.Second)
			}
		})
	}
}

// waitPhase waits until the target receives the given phase.
func (c *cluster) waitPhase(id string, phase int) {
	c.Target.t.Helper()
	c.Target.waitDaemonLog(`msg="live transfer pass" server=`+id+` direction=incoming pass=\d+ phase=`+string(rune('0'+phase)), 60*time.Second)
}

// bigChange makes the final pass last a few seconds at the target's 1 MiB/s.
func bigChange(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "big-change.dat"), randomish(16<<20), 0o644); err != nil {
		t.Fatal(err)
	}
}

func randomish(n int) []byte {
	b := make([]byte, n)
	x := uint64(88172645463325252)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// Cancels and kills in each phase. In phase 1 the source's server never
// stops; in phase 2 it is started again. Either way the target keeps
// nothing and the backend hears of the failure.
func TestLiveTransferFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		id     string
		phase  int
		action string // cancel-source, cancel-target, kill-source, kill-target
	}{
		{"cancel on source in phase 1", processID("7b000011-0000-4000-8000-000000000011"), 1, "cancel-source"},
		{"cancel on target in phase 1", processID("7b000012-0000-4000-8000-000000000012"), 1, "cancel-target"},
		{"cancel on source in phase 2", processID("7b000013-0000-4000-8000-000000000013"), 2, "cancel-source"},
		{"cancel on target in phase 2", processID("7b000014-0000-4000-8000-000000000014"), 2, "cancel-target"},
		{"kill source in phase 1", processID("7b000015-0000-4000-8000-000000000015"), 1, "kill-source"},
		{"kill target in phase 1", processID("7b000016-0000-4000-8000-000000000016"), 1, "kill-target"},
		{"kill source in phase 2", processID("7b000017-0000-4000-8000-000000000017"), 2, "kill-source"},
		{"kill target in phase 2", processID("7b000018-0000-4000-8000-000000000018"), 2, "kill-target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each case has its own server and two nodes: most of its time
			// is the throttled phase 1, spent waiting.
			t.Parallel()
			id := tc.id
			// Uncompressed, so that the bytes in flight (in buffers) stay
			// well below the tree.
			c := startCluster(t, []devpanel.Server{transferServer(t, id)}, func(name string, cfg *config.Config) {
				liveNodes(2)(name, cfg)
				cfg.System.Transfers.Compression = "none"
			})
			fill(t, c.Source, id, 40<<20)
			c.Source.power(id, "start")
			c.Source.waitLog(id, "Done (")
			c.startTransfer(id)
			c.waitPhase(id, 1)
			if tc.phase == 2 {
				// Phase 2 is the source's: its server is stopped and it
				// still has the big change to send (the target may still be
				// applying what phase 1 left in the buffers).
				bigChange(t, c.Source.dataDir(id))
				c.Source.waitDaemonLog(`msg="live transfer: the server is stopped, sending the last changes" server=`+id, 90*time.Second)
				// The point: the action lands while the phase runs, some
				// way into it rather than at its first byte.
				time.Sleep(500 * time.Millisecond)
			} else {
				// The point: the action lands some way into phase 1.
				time.Sleep(time.Second)
			}
			switch tc.action {
			case "cancel-source":
				if res, body := c.Source.request("DELETE", "/api/servers/"+id+"/transfer", nil, ""); res.StatusCode != 202 {
					t.Fatalf("cancel: %d %s", res.StatusCode, body)
				}
			case "cancel-target":
				if res, body := c.Target.request("DELETE", "/api/transfers/"+id, nil, ""); res.StatusCode != 202 {
					t.Fatalf("cancel: %d %s", res.StatusCode, body)
				}
			case "kill-source":
				c.Source.kill9()
			case "kill-target":
				c.Target.kill9()
			}

			// The target keeps nothing (after its restart when it was killed).
			if tc.action == "kill-target" {
				c.waitReports(c.Source, id, []string{"failure"}, 30*time.Second)
				c.Target.restart()
			} else {
				c.waitReports(c.Target, id, []string{"failure"}, 30*time.Second)
			}
			c.Target.assertGone(id)
			waitNoMarkers(t, filepath.Join(c.Target.Config.System.RootDirectory, "transfers"))

			if tc.action == "kill-source" {
				// The restarted source tells the backend, as in a classic transfer.
				c.Source.restart()
				c.waitReports(c.Source, id, []string{"failure"}, 30*time.Second)
				if tc.phase == 1 {
					// The daemon died, not the server: it is reattached running.
					c.Source.waitState(id, "running", 20*time.Second)
				}
				c.Source.assertUsable(id)
				return
			}
			c.waitReports(c.Source, id, []string{"failure"}, 30*time.Second)
			c.Source.waitDaemonLog(`server=`+id+` direction=outgoing status=(failed|cancelled)`, 20*time.Second)
			stopped := strings.Contains(c.Source.log.String(), "Stopping the server to send the last changes")
			if tc.phase == 1 && stopped {
				t.Fatalf("the source stopped the server in phase 1\n%s", c.Source.log)
			}
			if tc.phase == 2 {
				c.Source.waitDaemonLog(`server started again after a failed live transfer`, 30*time.Second)
				if !slices.ContainsFunc(c.Source.logs(id), func(l string) bool { return strings.Contains(l, "starting the server again on this node") }) {
					t.Errorf("the console does not say the server was started again: %v", c.Source.logs(id))
				}
			}
			c.Source.waitState(id, "running", 30*time.Second)
		})
	}
}

// A live transfer carries the server's install log (from wire version 3; both
// nodes speak version 4): after an install on the source, the admin's install
// log viewer shows the install's output on the target.
func TestLiveTransferCarriesInstallLog(t *testing.T) {
	id := processID("7b000021-0000-4000-8000-000000000021")
	s := transferServer(t, id)
	testimages.Busybox(context.Background(), t)
	s.InstallScript = &devpanel.InstallScript{
		ContainerImage: "~" + testimages.BusyboxTag, Entrypoint: "sh",
		Script: "echo install script output for the live transfer\r\necho done > /mnt/server/installed.txt\r\n",
	}
	c := startCluster(t, []devpanel.Server{s}, liveNodes(0))
	fill(t, c.Source, id, 2<<20)
	if res, body := c.Source.request("POST", "/api/servers/"+id+"/install", nil, ""); res.StatusCode != 202 {
		t.Fatalf("install: %d %s", res.StatusCode, body)
	}
	if call, ok := c.Panel.WaitForCall("POST", "/servers/"+id+"/install", 90*time.Second); !ok || !strings.Contains(string(call.Body), `"successful":true`) {
		t.Fatalf("the install on the source failed\n%s", c.Source.log)
	}
	srcLog, err := os.ReadFile(filepath.Join(c.Source.Config.System.LogDirectory, "install", id+".log"))
	if err != nil || !strings.Contains(string(srcLog), "install script output for the live transfer") {
		t.Fatalf("install log on the source: %v\n%s", err, srcLog)
	}

	c.startTransfer(id)
	c.waitReports(c.Target, id, []string{"success"}, 60*time.Second)
	c.Source.waitDaemonLog(`msg="transfer completed" server=`+id+` direction=outgoing live=true`, 30*time.Second)

	res, body := c.Target.request("GET", "/api/servers/"+id+"/install-logs", nil, "")
	var answer struct{ Data string }
	if res.StatusCode != 200 || json.Unmarshal(body, &answer) != nil || !strings.Contains(answer.Data, "install script output for the live transfer") {
		t.Fatalf("install log on the target: %d %s", res.StatusCode, body)
	}
	if got, err := os.ReadFile(filepath.Join(c.Target.Config.System.LogDirectory, "install", id+".log")); err != nil || string(got) != string(srcLog) {
		t.Fatalf("the target's install log differs from the source's: %v\n%q\n%q", err, got, srcLog)
	}
	if b, err := os.ReadFile(filepath.Join(c.Target.dataDir(id), "installed.txt")); err != nil || strings.TrimSpace(string(b)) != "done" {
		t.Fatalf("installed.txt on the target: %q %v", b, err)
	}
	c.Source.waitDaemonLog(`msg="the target speaks live transfers" server=`+id+` direction=outgoing version=4`, time.Second)
}

// waitNoMarkers fails the test unless the incoming transfer markers in dir
// are gone. A target reports a failed transfer, then removes its marker:
// the test waits for the marker to go (a loaded machine widens the gap)
// rather than read the directory once right after the report.
func waitNoMarkers(t *testing.T, dir string) {
	t.Helper()
	var entries []os.DirEntry
	if !wait.Until(30*time.Second, func() bool {
		entries, _ = os.ReadDir(dir)
		return len(entries) == 0
	}) {
		t.Fatalf("transfer markers left on the target: %v", entries)
	}
}
