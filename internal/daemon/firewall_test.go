package daemon

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/firewall"
	"github.com/wharf/wharf/internal/runtime"
	"github.com/wharf/wharf/internal/runtime/runtimetest"
	"github.com/wharf/wharf/internal/testutil/wait"
	"github.com/wharf/wharf/internal/usererr"
)

// TestGuardedStartIsRefusedWithoutTheFirewall: when the firewall's rules
// cannot be verified nor installed, a container start is refused with a
// user error that says why, and the container is not started; a bridge
// network the servers ensure is added to the firewall.
func TestGuardedStartIsRefusedWithoutTheFirewall(t *testing.T) {
	// A descriptor that is not a network namespace: every netlink call of
	// the firewall fails, as it does without CAP_NET_ADMIN.
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fw := firewall.New(firewall.Options{NetNS: int(f.Fd())})
	if _, err := fw.AddBridge(firewall.Bridge{Name: "service0"}); err != nil {
		t.Fatal(err)
	}
	inner := runtimetest.New(runtimetest.Process{StopCommand: "stop"})
	g := &guardedRuntime{Runtime: bridgeNaming{inner}, fw: fw, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	if err := g.Create(ctx, runtime.ContainerSpec{Name: "s1", Image: "img"}); err != nil {
		t.Fatal(err)
	}
	err = g.Start(ctx, "s1")
	ue, ok := usererr.From(err)
	if !ok || ue.Kind != usererr.Conflict {
		t.Fatalf("Start = %v, want a Conflict user error", err)
	}
	if st, err := inner.Inspect(ctx, "s1"); err != nil || st.Running {
		t.Fatalf("the container runs (%+v, %v) although the firewall is missing", st, err)
	}

	if _, err := g.EnsureNetwork(ctx, runtime.NetworkSpec{Name: "ip-10-0-0-1", Driver: "bridge", IPv4Subnet: "10.9.0.0/24"}); err != nil {
		t.Fatal(err)
	}
	got := fw.Bridges()
	if len(got) != 2 || got[1].Name != "br-0123456789ab" || got[1].IPv4Subnet.String() != "10.9.0.0/24" {
		t.Errorf("bridges after a per-IP network = %+v", got)
	}
}

// bridgeNaming is the in-memory engine with bridges named as Docker does.
type bridgeNaming struct{ *runtimetest.Runtime }

func (b bridgeNaming) EnsureNetwork(ctx context.Context, spec runtime.NetworkSpec) (runtime.NetworkInfo, error) {
	info, err := b.Runtime.EnsureNetwork(ctx, spec)
	info.BridgeName = "br-0123456789ab"
	return info, err
}

// TestICCDefaultIsAppliedOnceAndSaved: the boot step turns a Wings
// default off, marks the file, and leaves the operator's later choice.
func TestICCDefaultIsAppliedOnceAndSaved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yml")
	c := config.Defaults()
	c.UUID, c.TokenID, c.Token, c.Remote = "u", "t", "secret", "https://panel.example"
	c.Docker.Network.EnableICC = true // as Wings writes it
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	store := config.NewStore(path, loaded)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := applyICCDefault(store, log); err != nil {
		t.Fatal(err)
	}
	saved, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if saved.Docker.Network.EnableICC || !saved.Docker.Network.ICCDefaultApplied {
		t.Fatalf("saved: enable_icc %v, icc_default_applied %v", saved.Docker.Network.EnableICC, saved.Docker.Network.ICCDefaultApplied)
	}
	if err := store.Update(func(c *config.Config) { c.Docker.Network.EnableICC = true }); err != nil {
		t.Fatal(err)
	}
	if err := applyICCDefault(store, log); err != nil {
		t.Fatal(err)
	}
	if !store.Get().Docker.Network.EnableICC {
		t.Fatal("the operator's enable_icc: true after the switch was reset")
	}
}

// TestStartFirewallSaysWhenThereIsNone: the fake runtime has no firewall,
// an operator who turns it off is warned loudly, a network that is not a
// bridge is named, and ICC on is warned about; in none of these cases are
// the servers' starts guarded.
func TestStartFirewallSaysWhenThereIsNone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(c *config.Config)
		driver string
		want   []string
	}{
		{"fake runtime", func(c *config.Config) { c.Testing.Runtime = config.TestRuntimeFake }, "bridge", []string{"no firewall: the in-memory test runtime"}},
		{"switched off", func(c *config.Config) {
			c.Docker.Network.Firewall = false
			c.Docker.Network.EnableICC = true
		}, "bridge", []string{"WHARF'S FIREWALL IS OFF", "docker.network.enable_icc is on"}},
		{"host network", func(c *config.Config) {}, "host", []string{"the node's network is not a bridge"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Defaults()
			tc.mutate(c)
			var logged strings.Builder
			n := &node{
				log:     slog.New(slog.NewTextHandler(&logged, nil)),
				store:   config.NewStore(filepath.Join(t.TempDir(), "config.yml"), c),
				rt:      runtimetest.New(runtimetest.Process{}),
				network: runtime.NetworkInfo{Driver: tc.driver},
			}
			if err := n.startFirewall(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n.firewall != nil || n.serverRuntime != n.rt {
				t.Error("starts are guarded without a firewall")
			}
			for _, w := range tc.want {
				if !strings.Contains(logged.String(), w) {
					t.Errorf("the log lacks %q:\n%s", w, logged.String())
				}
			}
		})
	}
}

// TestWatchFirewallLogsAFailureAndStops: the watch verifies at every tick,
// logs a firewall it cannot reinstall, and ends with its context.
func TestWatchFirewallLogsAFailureAndStops(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fw := firewall.New(firewall.Options{NetNS: int(f.Fd())})
	if _, err := fw.AddBridge(firewall.Bridge{Name: "service0"}); err != nil {
		t.Fatal(err)
	}
	logged := &lockedBuilder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchFirewall(ctx, fw, slog.New(slog.NewTextHandler(logged, nil)), time.Millisecond)
	}()
	wait.For(t, 10*time.Second, func() bool {
		return strings.Contains(logged.String(), "firewall is not in place and cannot be reinstalled")
	}, "the watch to log the missing firewall")
	cancel()
	<-done
}

type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
