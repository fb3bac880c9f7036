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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: backend.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()

	// The backend gets a new port each run; the API port is the caller's choice.
	cfg.Remote = "http://" + ln.Addr().String()
	cfg.API.Host = "127.0.0.1"
	cfg.API.Port = opts.Port
	if err := cfg.Save(cfgPath); err != nil {
		return err
	}

	return daemon.Run(ctx, daemon.Options{
		ConfigPath: cfgPath,
		Version:    opts.Version,
		BootTime:   opts.BootTime,
		Ready: func(addr net.Addr) {
			printWelcome(opts.Out, cfg, addr, cfgPath)
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
	c.System.RootDirectory = filepath.Join(dir, "lib")
	c.System.Data = filepath.Join(dir, "lib", "volumes")
	c.System.ArchiveDirectory = filepath.Join(dir, "lib", "archives")
	c.System.BackupDirectory = filepath.Join(dir, "lib", "backups")
	c.System.LogDirectory = filepath.Join(dir, "log")
	c.System.TmpDirectory = filepath.Join(dir, "tmp")
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

func printWelcome(out io.Writer, cfg *config.Config, addr net.Addr, cfgPath string) {
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

Stop with Ctrl-C.
`, base, cfg.Remote, cfgPath, cfg.Token)
}
