// Command wharf is the node agent: it runs game servers in containers for a
// management panel. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/daemon"
	"github.com/wharf/wharf/internal/devmode"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	bootTime := time.Now()
	if err := run(bootTime, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "wharf:", err)
		os.Exit(1)
	}
}

func run(bootTime time.Time, args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if len(args) > 0 {
		switch args[0] {
		case "version":
			fmt.Println("wharf", version)
			return nil
		case "dev":
			fs := flag.NewFlagSet("wharf dev", flag.ContinueOnError)
			dir := fs.String("dir", ".wharf-dev", "state directory for the generated configuration and data")
			port := fs.Int("port", 8080, "API port")
			servers := fs.String("servers", "examples/servers", "directory of server definition YAML files served by the embedded backend")
			if err := fs.Parse(args[1:]); err != nil {
				return err
			}
			if _, err := os.Stat(*servers); errors.Is(err, os.ErrNotExist) {
				*servers = ""
			}
			return devmode.Run(ctx, devmode.Options{
				Dir: *dir, Port: *port, ServersDir: *servers,
				Version: version, BootTime: bootTime, Out: os.Stdout,
			})
		}
	}

	fs := flag.NewFlagSet("wharf", flag.ContinueOnError)
	cfgPath := fs.String("config", config.DefaultPath, "path of the configuration file")
	debug := fs.Bool("debug", false, "verbose logging (not persisted)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: wharf [--config PATH] [--debug]\n       wharf dev [--dir DIR] [--port N] [--servers DIR]\n       wharf version\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unknown command %q", fs.Arg(0))
	}
	return daemon.Run(ctx, daemon.Options{
		ConfigPath: *cfgPath, Debug: *debug, Version: version, BootTime: bootTime,
	})
}
