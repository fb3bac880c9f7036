// Command wharf is the node agent: it runs game servers in containers for a
// management panel. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"
	_ "time/tzdata" // time zones in a container image without /usr/share/zoneinfo

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/configure"
	"github.com/wharf/wharf/internal/daemon"
	"github.com/wharf/wharf/internal/devmode"
	"github.com/wharf/wharf/internal/diagnostics"
	"github.com/wharf/wharf/internal/files"
	"github.com/wharf/wharf/internal/runtime/docker"
)

// version and commit are stamped at build time (make release):
// -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	if commit == "unknown" {
		commit = vcsRevision()
	}
	bootTime := time.Now()
	err := run(bootTime, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return // --help printed the usage: asking for it is not an error
	}
	if err != nil {
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
			fmt.Printf("wharf %s (commit %s, %s)\n", version, commit, goVersion())
			return nil
		case "configure":
			return runConfigure(ctx, args[1:])
		case "diagnostics":
			return runDiagnostics(ctx, args[1:])
		case "backups":
			return runBackups(args[1:])
		case files.WorkerCommand: // hidden: the daemon's isolated archive decoder
			return files.ExtractWorkerMain(ctx)
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
	logFormat := fs.String("log-format", "", "log format: text or json (default: system.log_format, text)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: wharf [--config PATH] [--debug] [--log-format text|json]\n"+
			"       wharf configure --panel-url URL --token KEY --node ID [--config-path PATH] [--override] [--allow-insecure]\n"+
			"       wharf diagnostics [--config PATH] [--log-lines N]\n"+
			"       wharf backups export [--config PATH] --to DIR BACKUP_UUID...\n"+
			"       wharf backups verify [--config PATH] [BACKUP_UUID...]\n"+
			"       wharf dev [--dir DIR] [--port N] [--servers DIR]\n"+
			"       wharf version\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unknown command %q", fs.Arg(0))
	}
	if *logFormat != "" && *logFormat != "text" && *logFormat != "json" {
		return fmt.Errorf("--log-format must be text or json, got %q", *logFormat)
	}
	return daemon.Run(ctx, daemon.Options{
		ConfigPath: *cfgPath, Debug: *debug, Version: version, Commit: commit, BootTime: bootTime, LogFormat: *logFormat,
	})
}

func goVersion() string { return runtime.Version() }

// vcsRevision is the commit go build recorded, for binaries built without
// make release.
func vcsRevision() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return s.Value[:12]
			}
		}
	}
	return "unknown"
}

// runConfigure is `wharf configure`, with the flags of `wings configure`.
func runConfigure(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("wharf configure", flag.ContinueOnError)
	var o configure.Options
	for _, name := range []string{"panel-url", "p"} {
		fs.StringVar(&o.PanelURL, name, "", "the panel's base URL, e.g. https://panel.example.com")
	}
	for _, name := range []string{"token", "t"} {
		fs.StringVar(&o.Token, name, "", "an application API key with read access to Nodes (never printed)")
	}
	for _, name := range []string{"node", "n"} {
		fs.StringVar(&o.Node, name, "", "the node's id in the panel")
	}
	for _, name := range []string{"config-path", "c"} {
		fs.StringVar(&o.Path, name, config.DefaultPath, "where to write the configuration")
	}
	fs.BoolVar(&o.Override, "override", false, "replace an existing configuration file")
	fs.BoolVar(&o.AllowInsecure, "allow-insecure", false, "do not verify the panel's TLS certificate; allow a plain http panel URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := configure.Run(ctx, o)
	if err != nil {
		return err
	}
	fmt.Printf("Wrote the configuration of node %s to %s.\n", c.UUID, o.Path)
	return nil
}

// runDiagnostics is `wharf diagnostics`.
func runDiagnostics(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("wharf diagnostics", flag.ContinueOnError)
	cfgPath := fs.String("config", config.DefaultPath, "path of the configuration file")
	lines := fs.Int("log-lines", 100, "how many of the last log lines to include")
	hide := fs.Bool("hide-endpoints", false, "leave out the panel URL and the node's addresses (for a public paste)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := diagnostics.Options{
		ConfigPath: *cfgPath, Version: version, Commit: commit, LogLines: max(*lines, 0), HideEndpoints: *hide,
	}
	// The report asks the engine through the runtime, as the daemon's does.
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	host := "" // docker.host when the configuration reads, else DOCKER_HOST
	if cfg, err := config.Load(*cfgPath); err == nil {
		host = cfg.Docker.Host
	}
	rt, err := docker.New(dialCtx, docker.Options{Host: host, Logger: slog.New(slog.DiscardHandler)})
	cancel()
	if err != nil {
		opts.RuntimeError = err
	} else {
		defer rt.Close()
		opts.Runtime = rt
	}
	return diagnostics.Write(ctx, os.Stdout, opts)
}
