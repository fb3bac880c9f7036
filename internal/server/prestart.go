package server

import (
	"context"
	"encoding/json"
	"io/fs"

	"github.com/wharf/wharf/internal/eggconfig"
)

// updateConfigurationFiles rewrites the egg's configuration files. A file
// that cannot be rewritten is logged and does not block the start.
func (s *Server) updateConfigurationFiles(ctx context.Context, def Definition) {
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
	for _, err := range eggconfig.Apply(ctx, s.files.Trusted(), files, vars, s.log) {
		s.log.Warn("configuration file not updated", "error", err)
	}
}

// fixOwnership gives every file of the server to the system user, never
// following a symbolic link.
func (s *Server) fixOwnership(ctx context.Context) error {
	cfg := s.deps.Config.Get()
	uid, gid := cfg.System.User.UID, cfg.System.User.GID
	s.daemonMessage("Ensuring file permissions are set correctly, this could take a few seconds...")
	trusted := s.files.Trusted()
	return trusted.WalkContext(ctx, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			s.log.Debug("ownership walk", "path", path, "error", err)
			return nil
		}
		if lerr := trusted.LchownEntry(path, d, uid, gid); lerr != nil {
			s.log.Debug("chown failed", "path", path, "error", lerr)
		}
		return nil
	})
}
