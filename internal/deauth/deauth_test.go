package deauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/server"
	"github.com/wharf/wharf/internal/tokens"
)

// session is a session of any kind (websocket, SFTP) as the server sees it.
type session struct {
	user   string
	closed int
}

func (s *session) User() string                  { return s.user }
func (s *session) Close(code int, reason string) { s.closed = code }

func newServers(t *testing.T, n int) (*server.Manager, []*server.Server) {
	t.Helper()
	dir := t.TempDir()
	c := config.Defaults()
	c.UUID, c.TokenID, c.Token, c.Remote = uuid.NewString(), "t", "node-token", "https://panel.example.com"
	c.System.RootDirectory, c.System.Data = dir, filepath.Join(dir, "volumes")
	c.System.User.UID, c.System.User.GID = -1, -1
	store := config.NewStore(filepath.Join(dir, "config.yml"), c)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	mgr := server.NewManager(ctx, &server.Deps{Config: store, Log: log})
	var out []*server.Server
	for range n {
		def, err := server.ParseDefinition([]byte(fmt.Sprintf(`{"uuid":%q}`, uuid.NewString())), nil, true)
		if err != nil {
			t.Fatal(err)
		}
		s, err := mgr.Add(def)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return mgr, out
}

func TestDeauthorizeDeniesAndClosesOnlyThatUserOnTheListedServers(t *testing.T) {
	mgr, srvs := newServers(t, 2)
	boot := time.Now().Add(-time.Hour)
	deny := tokens.NewDenylist(boot)
	now := time.Now()
	d := &Service{Denylist: deny, Servers: mgr, Now: func() time.Time { return now }}

	alice1, bob1, alice2 := &session{user: "alice"}, &session{user: "bob"}, &session{user: "alice"}
	srvs[0].AddSession(alice1)
	srvs[0].AddSession(bob1)
	srvs[1].AddSession(alice2)

	// Listed in upper case: the panel's UUIDs are matched case-insensitively.
	if err := d.Deauthorize("alice", []string{strings.ToUpper(srvs[0].UUID())}); err != nil {
		t.Fatal(err)
	}
	if alice1.closed != server.CloseRevoked || bob1.closed != 0 || alice2.closed != 0 {
		t.Fatalf("closed: alice1 %d, bob1 %d, alice2 %d", alice1.closed, bob1.closed, alice2.closed)
	}
	issued := now.Add(-time.Minute)
	if err := deny.Check(srvs[0].UUID(), "alice", issued); !errors.Is(err, tokens.ErrDenied) {
		t.Fatalf("alice's older token on the listed server: %v", err)
	}
	if err := deny.Check(srvs[1].UUID(), "alice", issued); err != nil {
		t.Fatalf("alice's token on another server: %v", err)
	}

	// No list: every server.
	if err := d.Deauthorize("alice", nil); err != nil {
		t.Fatal(err)
	}
	if alice2.closed != server.CloseRevoked || bob1.closed != 0 {
		t.Fatalf("closed: alice2 %d, bob1 %d", alice2.closed, bob1.closed)
	}
}

func TestDeauthorizeNeedsAUser(t *testing.T) {
	mgr, _ := newServers(t, 0)
	d := &Service{Denylist: tokens.NewDenylist(time.Now()), Servers: mgr}
	if err := d.Deauthorize("", nil); !errors.Is(err, ErrNoUser) {
		t.Fatalf("err %v", err)
	}
}
