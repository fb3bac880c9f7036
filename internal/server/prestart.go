package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"

	"github.com/wharf/wharf/internal/eggconfig"
	"github.com/wharf/wharf/internal/sandbox"
)

// prepareFiles runs a start's writes to the server's files, holding a start
// job (JobStart, shared) through whose filesystem and under whose context
// they run: the egg's configuration files, then the ownership fix when
// system.check_permissions_on_boot asks for it.
func (s *Server) prepareFiles(ctx context.Context, def Definition) error {
	job, err := s.BeginJob(ctx, JobStart)
	if err != nil {
		return err
	}
	defer job.End()
	s.updateConfigurationFiles(job, def)
	if s.deps.Config.Get().System.CheckPermissionsOnBoot {
		return s.fixOwnership(job)
	}
	return nil
}

// updateConfigurationFiles rewrites the egg's configuration files. A file
// that cannot be rewritten is logged and does not block the start.
func (s *Server) updateConfigurationFiles(job *Job, def Definition) {
	ctx := job.Context()
	if len(def.Process.Configs) == 0 || string(def.Process.Configs) == "null" {
		return
	}
	var files []eggconfig.File
	if err := json.Unmarshal(def.Process.Configs, &files); err != nil {
		s.log.Warn("the process configuration's configs cannot be decoded", "error", err)
		return
	}
	if len(files) == 0 {
		return
	}
	s.daemonMessage("Updating process configuration files...")
	vars := eggconfig.Vars{DockerInterface: s.deps.Config.Get().Docker.Network.Interface}
	// The agent writes these files, not the user: the denylist does not apply.
	for _, err := range eggconfig.Apply(ctx, job.FS().Trusted(), files, vars, s.log) {
		s.log.Warn("configuration file not updated", "error", err)
	}
}

// fixOwnership gives every file of the server to the system user, never
// following a symbolic link. A part of the tree the walk cannot read, or
// an entry that cannot be chowned, is logged as an error naming it and
// told on the console, and the walk goes on with the rest: the server
// still starts (its process runs as that user either way, and refusing to
// start over a directory the game itself made unreadable would only lock
// the owner out of their server). Entries that vanish meanwhile are normal.
func (s *Server) fixOwnership(job *Job) error {
	ctx := job.Context()
	cfg := s.deps.Config.Get()
	uid, gid := cfg.System.User.UID, cfg.System.User.GID
	s.daemonMessage("Ensuring file permissions are set correctly, this could take a few seconds...")
	trusted := job.FS().Trusted()
	failed := 0
	err := trusted.WalkContext(ctx, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil {
			err = trusted.LchownEntry(path, d, uid, gid)
		}
		if err != nil && !sandbox.Vanished(err) {
			failed++
			s.log.Error("ownership not fixed", "path", sandbox.ShortPath(path), "error", err)
		}
		return nil
	})
	if err != nil && ctx.Err() == nil { // the walk could not finish (ErrWalkMoved)
		failed++
		s.log.Error("ownership walk ended early", "error", err)
		err = nil
	}
	if failed > 0 {
		s.daemonMessage(fmt.Sprintf("The owner of %d files or directories could not be set: see the node's log.", failed))
	}
	return err
}
