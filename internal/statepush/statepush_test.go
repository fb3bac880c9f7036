package statepush

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/panel"
	"github.com/wharf/wharf/internal/testutil/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const srv = "8d7c3b2a-0000-4000-8000-0000000000c1"

func newPanel(t *testing.T) (*devpanel.Panel, Sender) {
	p := devpanel.New("tid", "tok")
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)
	c := panel.New(func() panel.Settings {
		return panel.Settings{Remote: hs.URL, TokenID: "tid", Token: "tok", Timeout: 2 * time.Second}
	}, "test")
	return p, c.PushContainerStatus
}

func pushed(t *testing.T, p *devpanel.Panel) []panel.ContainerStatus {
	t.Helper()
	var out []panel.ContainerStatus
	for _, c := range p.CallsTo("POST", "/servers/"+srv+"/container/status") {
		var body struct {
			Data panel.ContainerStatus `json:"data"`
		}
		if err := json.Unmarshal(c.Body, &body); err != nil {
			t.Fatalf("body %s: %v", c.Body, err)
		}
		out = append(out, body.Data)
	}
	return out
}

// The panel receives {"data": {"previous_state", "new_state"}} for a change.
func TestPushesTheChange(t *testing.T) {
	p, send := newPanel(t)
	ps := New(send, slog.New(slog.DiscardHandler), nil)
	defer ps.Close()
	ps.Changed(srv, "offline", "starting")
	wait.For(t, 5*time.Second, func() bool { return len(pushed(t, p)) == 1 }, "the first push")
	if got := pushed(t, p)[0]; got != (panel.ContainerStatus{PreviousState: "offline", NewState: "starting"}) {
		t.Fatalf("pushed %+v", got)
	}
}

// A push the panel fails is retried until the panel has the latest state:
// otherwise the Pelican panel shows the cached old state for an hour.
func TestRetriesUntilThePanelHasTheLatestState(t *testing.T) {
	p, send := newPanel(t)
	p.FailNext("/servers/"+srv+"/container/status", 8) // beyond the client's own retries
	ps := New(send, slog.New(slog.DiscardHandler), nil)
	defer ps.Close()
	ps.Changed(srv, "starting", "running")
	ps.Changed(srv, "running", "stopping")
	// The panel records the failed calls too: the ninth is the first it
	// accepts.
	wait.For(t, 60*time.Second, func() bool { return len(pushed(t, p)) >= 9 }, "the push retried past 8 failures")
	if got := pushed(t, p); got[len(got)-1].NewState != "stopping" {
		t.Fatalf("the delivered push is %+v, want the latest state", got[len(got)-1])
	}
	if got := pushed(t, p); got[len(got)-1].PreviousState != "starting" {
		t.Fatalf("coalesced push %+v: the previous state must be the one the panel last saw", got[len(got)-1])
	}
}

// A panel without the route (Pterodactyl) gets one request, not one per
// state change, until RouteRecheck has passed.
func TestAPanelWithoutTheRouteIsNotDisturbed(t *testing.T) {
	p, send := newPanel(t)
	p.RemoveRoute("/container/status")
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	ps := New(send, slog.New(slog.DiscardHandler), clock)
	defer ps.Close()
	ps.Changed(srv, "offline", "starting")
	wait.For(t, 5*time.Second, func() bool { return len(pushed(t, p)) == 1 }, "the first push")
	for _, st := range []string{"running", "stopping", "offline", "starting"} {
		ps.Changed(srv, "x", st)
	}
	// Nothing more is sent while paused: wait for a request that must not
	// come by sending a marker through another pusher on the same panel.
	marker := New(send, slog.New(slog.DiscardHandler), nil)
	marker.Changed("marker", "offline", "running")
	wait.For(t, 5*time.Second, func() bool { return len(p.CallsTo("POST", "/servers/marker/container/status")) == 1 }, "the marker push")
	marker.Close()
	if n := len(pushed(t, p)); n != 1 {
		t.Fatalf("%d pushes to a panel without the route, want 1", n)
	}
}

// A forgotten server's pending change is dropped.
func TestForget(t *testing.T) {
	p, send := newPanel(t)
	p.RemoveRoute("/container/status")
	ps := New(send, slog.New(slog.DiscardHandler), nil)
	defer ps.Close()
	ps.Changed(srv, "offline", "starting")
	wait.For(t, 5*time.Second, func() bool { return len(pushed(t, p)) == 1 }, "the first push")
	ps.Forget(srv)
	ps.mu.Lock()
	n := len(ps.pending)
	ps.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d changes pending after Forget", n)
	}
}
