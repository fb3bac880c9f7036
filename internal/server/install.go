package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/atomicfile"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/consoletext"
	"github.com/wharf/wharf/internal/events"
	"github.com/wharf/wharf/internal/runtime"
)

// installOutputLimit bounds the installer output kept for the install log.
const installOutputLimit = 4 << 20

// install runs the installation: the backend's script in an installer
// container with the server's files at /mnt/server. Reinstall keeps the
// existing files (the script decides what to do with them) and stops a
// running server first, through the power lock like any stop. The backend
// is told whether the script succeeded (exit code 0). The caller holds the
// job slot (job: JobInstall or JobReinstall), under its context; the job
// ends before the backend is told, so that what the backend does next
// finds the server free.
func (s *Server) install(job *Job, reinstall bool) error {
	ctx := job.Context()
	uuid := s.UUID()
	var err error
	if reinstall {
		err = s.stopForReinstall(ctx)
	}
	if err == nil {
		err = s.Sync(ctx)
	}
	successful := false
	if err == nil {
		successful, err = s.runInstaller(ctx)
	}
	if err != nil {
		s.log.Error("installation failed", "error", err)
		s.daemonMessage("Installation failed: " + err.Error())
	}
	job.End()
	if perr := s.deps.Panel.SetInstallationStatus(context.WithoutCancel(ctx), uuid, successful && err == nil, reinstall); perr != nil {
		s.log.Error("could not report the installation status to the backend", "error", perr)
		if err == nil {
			err = perr
		}
	}
	s.events.Publish(events.New(events.InstallCompleted, ""))
	return err
}

// stopForReinstall stops a running server before its files are reinstalled:
// through the power lock (a power action running finishes first, a kill
// still wins), with the configured stop escalating to a kill after the stop
// timeout. A stop that fails is followed by a kill.
func (s *Server) stopForReinstall(ctx context.Context) error {
	if s.State() == Offline {
		return nil
	}
	// The holder may be a stop waiting for its own timeout.
	err := s.stopLocked(ctx, s.stopTimeout()+killWait)
	if err == nil {
		return nil
	}
	s.log.Warn("stopping before the reinstall failed; killing", "error", err)
	if kerr := s.Kill(ctx); kerr != nil || s.State() != Offline {
		return fmt.Errorf("the server could not be stopped before the reinstall: %w", errors.Join(err, kerr))
	}
	return nil
}

func (s *Server) runInstaller(ctx context.Context) (bool, error) {
	def := s.Definition()
	if def.Config.SkipEggScripts {
		s.log.Info("skipping the install script (skip_egg_scripts)")
		return true, nil
	}
	s.events.Publish(events.New(events.InstallStarted, ""))
	uuid := def.Config.UUID
	script, err := s.deps.Panel.InstallationScript(ctx, uuid)
	if err != nil {
		return false, err
	}
	cfg := s.deps.Config.Get()
	scriptDir := filepath.Join(cfg.System.TmpDirectory, uuid)
	if err := os.MkdirAll(scriptDir, 0o700); err != nil {
		return false, err
	}
	defer os.RemoveAll(scriptDir)
	if err := s.scriptDirForEngine(cfg, scriptDir); err != nil {
		return false, err
	}
	body := strings.ReplaceAll(script.Script, "\r\n", "\n")
	if err := atomicfile.WriteFile(filepath.Join(scriptDir, "install.sh"), []byte(body), 0o644); err != nil {
		return false, err
	}

	rt := s.deps.Runtime
	progress := func(line string) { s.events.Publish(events.New(events.InstallOutput, line)) }
	if err := rt.EnsureImage(ctx, script.ContainerImage, s.registryAuth(script.ContainerImage), progress); err != nil {
		return false, fmt.Errorf("installer image: %w", err)
	}
	spec := s.installerSpec(def, script.ContainerImage, script.Entrypoint, scriptDir)
	defer func() {
		cctx, cancel := CleanupContext(ctx)
		defer cancel()
		_ = s.deps.removeContainer(cctx, s.log, spec.Name)
	}()
	if err := rt.Create(ctx, spec); err != nil {
		return false, err
	}
	stream, err := rt.Attach(ctx, spec.Name)
	if err != nil {
		return false, err
	}
	defer stream.Close()

	var output bytes.Buffer
	readDone := make(chan struct{})
	if !s.goServer(func() {
		defer close(readDone)
		_ = consoletext.ReadLines(stream, MaxLineBytes, func(line string) {
			if output.Len() < installOutputLimit {
				output.WriteString(line + "\n")
			}
			s.events.Publish(events.New(events.InstallOutput, line))
		})
	}) {
		return false, ErrDeleted
	}
	s.daemonMessage("Starting installation process, this could take a few minutes...")
	if err := rt.Start(ctx, spec.Name); err != nil {
		_ = stream.Close()
		<-readDone
		return false, err
	}
	st, err := rt.Wait(ctx, spec.Name)
	// The output ends with the process; bound the wait in case the engine keeps it open.
	select {
	case <-readDone:
	case <-time.After(10 * time.Second):
		_ = stream.Close()
		<-readDone
	}
	if err != nil {
		return false, err
	}
	s.daemonMessage("Installation process completed.")
	s.writeInstallLog(def, script.ContainerImage, script.Entrypoint, spec.Env, st.ExitCode, output.Bytes())
	if st.ExitCode != 0 {
		return false, fmt.Errorf("the install script exited with code %d", st.ExitCode)
	}
	return true, nil
}

// installerSpec: never privileged, the image's own user, no Docker socket,
// only /mnt/server and /mnt/install mounted, limits = the higher of the
// installer limits and the server's, and a PID limit. Hardened for an
// installer: no-new-privileges and no raw or packet sockets (the script
// runs the owner's code on the bridge shared with every server), with the
// capabilities a package manager run as root needs and a writable root
// filesystem (docker's installerCapDrop says which and why).
func (s *Server) installerSpec(def Definition, image, entrypoint, scriptDir string) runtime.ContainerSpec {
	cfg := s.deps.Config.Get()
	d := cfg.Docker
	build := def.Config.Build
	build.MemoryLimit = max(build.MemoryLimit, d.InstallerLimits.Memory)
	if d.InstallerLimits.CPU == 0 || build.CPULimit == 0 {
		build.CPULimit = 0
	} else {
		build.CPULimit = max(build.CPULimit, d.InstallerLimits.CPU)
	}
	limits := ContainerLimits(build, d)
	if limits.PidsLimit <= 0 {
		limits.PidsLimit = 512
	}
	if entrypoint == "" {
		entrypoint = "sh"
	}
	return runtime.ContainerSpec{
		Name:     def.Config.UUID + "_installer",
		Hostname: "installer",
		Image:    strings.TrimPrefix(image, "~"),
		// The entrypoint replaces the image's own, so that an image made to
		// run a server still runs the script.
		Entrypoint: []string{entrypoint},
		Cmd:        []string{"/mnt/install/install.sh"},
		Env:        EnvironmentVariables(def.Config, cfg.System.Timezone),
		Labels:     ContainerLabels(def.Config, "server_installer", cfg.UUID),
		Mounts:     []runtime.Mount{{Source: s.DataDir(), Target: "/mnt/server"}, {Source: scriptDir, Target: "/mnt/install"}},
		Limits:     limits,
		Tmpfs:      map[string]string{"/tmp": fmt.Sprintf("rw,exec,nosuid,size=%dM", d.TmpfsSize)},
		DNS:        d.Network.DNS,
		Network:    d.Network.Mode,
		LogConfig:  runtime.LogConfig{Type: d.LogConfig.Type, Config: d.LogConfig.Config},
		UsernsMode: d.UsernsMode,
		// The script runs the owner's code (npm and pip hooks).
		HardenedInstaller: true,
		// The install script writes into the same quota as the game.
		QuotaLocked: cfg.System.Quotas.Enabled,
	}
}

func (s *Server) writeInstallLog(def Definition, image, entrypoint string, env []string, exit int, output []byte) {
	dir := filepath.Join(s.deps.Config.Get().System.LogDirectory, "install")
	var b bytes.Buffer
	fmt.Fprintf(&b, "Wharf installation log\n\nServer UUID: %s\nContainer image: %s\nContainer entrypoint: %s\nExit code: %d\n\nEnvironment variables:\n", def.Config.UUID, image, entrypoint, exit)
	for _, e := range env {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	b.WriteString("\nScript output:\n")
	b.Write(output)
	if err := os.MkdirAll(dir, 0o700); err == nil {
		err = atomicfile.WriteFile(filepath.Join(dir, def.Config.UUID+".log"), b.Bytes(), 0o600)
		if err != nil {
			s.log.Warn("could not write the install log", "error", err)
		}
	}
}

// InstallAsync claims the job slot for an install or a reinstall, then runs
// it in the background (the HTTP API answers 202). A server busy with
// another job is refused at once with a *BusyError (409 naming the job).
func (s *Server) InstallAsync(reinstall bool) error {
	s.mu.RLock()
	deleted := s.deleted
	s.mu.RUnlock()
	if deleted {
		return ErrDeleted
	}
	kind := JobInstall
	if reinstall {
		kind = JobReinstall
	}
	job, err := s.BeginJob(s.ctx, kind)
	if err != nil {
		return err
	}
	if !s.goServer(func() {
		defer job.End()
		_ = s.install(job, reinstall)
	}) {
		job.End()
		return ErrDeleted
	}
	return nil
}

// scriptDirForEngine gives the install script directory to system.username
// (still 0700) when the engine is rootless (issue 37): the engine mounts it
// as its own user, system.username on a rootless node, who could not enter
// a root-owned 0700 directory. It holds this server's script only. Not on
// a rootful engine, even with system.user.rootless.enabled: there the
// hardened installer runs as root without dac_override and must own it.
func (s *Server) scriptDirForEngine(cfg *config.Config, dir string) error {
	if !rootlessEngine(s.deps.Runtime) {
		return nil
	}
	if err := os.Lchown(dir, cfg.System.User.UID, cfg.System.User.GID); err != nil {
		return fmt.Errorf("giving the install script directory to system.username for the rootless engine: %w", err)
	}
	return nil
}

// rootlessEngine reports whether the servers' engine says it runs rootless
// (runtime.EngineFactser).
func rootlessEngine(rt runtime.Runtime) bool {
	f, ok := rt.(runtime.EngineFactser)
	return ok && f.Facts().Rootless
}
