// Package devmode runs the daemon for a newcomer: a generated configuration
// under a state directory and an embedded backend serving server definitions
// from YAML files, so that no panel is needed.
package devmode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/daemon"
	"github.com/wharf/wharf/internal/devimage"
	"github.com/wharf/wharf/internal/devpanel"
)

// Options configure dev mode.
type Options struct {
	Dir        string // state directory, created if missing
	Port       int    // API port
	ServersDir string // directory of server definition YAML files; may be empty
	Version    string
	BootTime   time.Time
	Out        io.Writer // where the welcome text goes
}

// Run starts the embedded backend and the daemon until ctx ends.
func Run(ctx context.Context, opts Options) error {
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "config.yml")
	cfg, err := loadOrCreate(cfgPath, dir)
	if err != nil {
		return err
	}

	backend := devpanel.New(cfg.TokenID, cfg.Token)
	if opts.ServersDir != "" {
		if err := backend.LoadDir(opts.ServersDir); err != nil {
			return fmt.Errorf("loading server definitions: %w", err)
		}
	}
	ensureDevImages(ctx, opts.Out, cfg.Docker.Host)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: backend.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hs.Serve(ln)
	}()
	defer func() {
		_ = hs.Close()
		<-served
	}()

	// The backend gets a new port each run; the API port is the caller's choice.
	cfg.Remote = "http://" + ln.Addr().String()
	cfg.API.Host = "127.0.0.1"
	cfg.API.Port = opts.Port
	// Dev mode is for this machine only: SFTP on loopback too.
	cfg.System.SFTP.BindAddress = "127.0.0.1"
	if err := cfg.Save(cfgPath); err != nil {
		return err
	}

	example := ""
	if ids := backend.ServerIDs(); len(ids) > 0 {
		example = ids[0]
	}
	return daemon.Run(ctx, daemon.Options{
		ConfigPath: cfgPath,
		Version:    opts.Version,
		BootTime:   opts.BootTime,
		Ready: func(addr net.Addr) {
			printWelcome(opts.Out, cfg, addr, cfgPath, example)
		},
	})
}

func loadOrCreate(path, dir string) (*config.Config, error) {
	if c, err := config.Load(path); err == nil {
		return c, nil
	} else if !errors.Is(err, config.ErrNotFound) {
		return nil, err
	}
	c := config.Defaults()
	c.UUID = uuid.NewString()
	c.TokenID = randomHex(8)
	c.Token = randomHex(32)
	c.Remote = "http://127.0.0.1:1" // replaced at every start
	c.PlaceUnder(dir)
	if u, err := user.Current(); err == nil {
		c.System.Username = u.Username
	}
	c.Docker.Network.Name = "wharf_dev_nw"
	c.Docker.Network.Mode = "wharf_dev_nw"
	c.Docker.Network.BridgeName = "wharfdev0"
	if err := c.Save(path); err != nil {
		return nil, err
	}
	return c, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// The local images the example definitions use. They are built when
// missing: the game server from this source tree with the Go toolchain.
const (
	devGameServerImage = "wharf-dev/gameserver:latest"
	devInstallerImage  = "wharf-dev/installer:latest"
)

// ensureDevImages builds the dev images when they are missing. A failure is
// reported and does not stop dev mode: only starting the example needs them.
func ensureDevImages(ctx context.Context, out io.Writer, host string) {
	if out == nil {
		out = io.Discard
	}
	cli, err := devimage.NewClient(ctx, host)
	if err != nil {
		fmt.Fprintf(out, "dev mode: Docker is not reachable (%v); servers cannot run.\n", err)
		return
	}
	defer cli.Close()
	for _, img := range []struct {
		tag   string
		build func(context.Context, *devimage.Client, string) error
	}{
		{devGameServerImage, devimage.GameServer},
		{devInstallerImage, devimage.Busybox},
	} {
		ok, err := devimage.Exists(ctx, cli, img.tag)
		if err == nil && ok {
			continue
		}
		fmt.Fprintf(out, "dev mode: building the image %s...\n", img.tag)
		if err := img.build(ctx, cli, img.tag); err != nil {
			fmt.Fprintf(out, "dev mode: could not build %s: %v\n", img.tag, err)
		}
	}
}

func printWelcome(out io.Writer, cfg *config.Config, addr net.Addr, cfgPath, example string) {
	if out == nil {
		return
	}
	base := "http://" + addr.String()
	fmt.Fprintf(out, `
Wharf dev mode is running.
  API:          %[1]s
  backend:      %[2]s (embedded)
  config:       %[3]s
  node token:   %[4]s

Try:
  curl -s -H 'Authorization: Bearer %[4]s' %[1]s/api/system
  curl -s -H 'Authorization: Bearer %[4]s' %[1]s/api/servers
`, base, cfg.Remote, cfgPath, cfg.Token)
	if example != "" {
		fmt.Fprintf(out, `
Start the example server, then read its console:
  curl -s -X POST -H 'Authorization: Bearer %[2]s' -H 'Content-Type: application/json' -d '{"action":"start"}' %[1]s/api/servers/%[3]s/power
  curl -s -H 'Authorization: Bearer %[2]s' '%[1]s/api/servers/%[3]s/logs?size=20'
Send it a command, and stop it:
  curl -s -X POST -H 'Authorization: Bearer %[2]s' -H 'Content-Type: application/json' -d '{"commands":["echo hello"]}' %[1]s/api/servers/%[3]s/commands
  curl -s -X POST -H 'Authorization: Bearer %[2]s' -H 'Content-Type: application/json' -d '{"action":"stop"}' %[1]s/api/servers/%[3]s/power
`, base, cfg.Token, example)
	}
	fmt.Fprintf(out, "\nStop with Ctrl-C.\n")
}
