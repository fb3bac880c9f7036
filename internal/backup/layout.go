package backup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/wharf/wharf/internal/atomicfile"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/ids"
)

// The layouts of the backup directory (system.backups.layout). Both are
// always read; the setting only chooses where new archives go.
const (
	// LayoutFlat is <dir>/<backup>.tar.gz (Pterodactyl Wings, Wharf's
	// default), with a .<backup>.owner record naming the server.
	LayoutFlat = "flat"
	// LayoutPerServer is <dir>/<server>/<backup>.tar.gz (Pelican Wings):
	// the directory itself names the server.
	LayoutPerServer = "per_server"
	// LayoutAuto is per_server when the directory already holds a server's
	// subdirectory, else flat.
	LayoutAuto = "auto"
)

func flatPath(dir, backup string) string { return filepath.Join(dir, backup+".tar.gz") }

func perServerPath(dir, server, backup string) string {
	return filepath.Join(dir, server, backup+".tar.gz")
}

// ownerPath records which server a flat local backup belongs to, so that a
// server cannot restore or delete another server's backup by its UUID.
func ownerPath(dir, backup string) string { return filepath.Join(dir, "."+backup+".owner") }

func isRegular(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// LocalPath returns the archive of the local backup of server, in either
// layout: the per-server one first (only server's own directory is looked
// in), then the flat one, unless its owner record names another server.
// A flat archive without an owner record (made by Pterodactyl Wings) is
// found for any server. ErrBadUUID for a malformed backup identifier,
// ErrNotFound when there is none.
func LocalPath(cfg *config.Config, server, backup string) (string, error) {
	if !ids.IsUUID(backup) {
		return "", ErrBadUUID
	}
	dir := cfg.System.BackupDirectory
	if ids.IsUUID(server) {
		if p := perServerPath(dir, server, backup); isRegular(p) {
			return p, nil
		}
	}
	p := flatPath(dir, backup)
	if !isRegular(p) {
		return "", ErrNotFound
	}
	if owner, err := os.ReadFile(ownerPath(dir, backup)); err == nil && strings.TrimSpace(string(owner)) != server {
		return "", ErrNotFound
	}
	return p, nil
}

// WriteLayout is the layout new local backups are written in: the
// configured one, or for auto the one the directory already uses.
func WriteLayout(cfg *config.Config) string {
	switch l := cfg.System.Backups.Layout; l {
	case LayoutFlat, LayoutPerServer:
		return l
	}
	if hasServerDirectory(cfg.System.BackupDirectory) {
		return LayoutPerServer
	}
	return LayoutFlat
}

// hasServerDirectory reports whether dir holds a subdirectory named by a
// UUID (Pelican Wings' layout). Wharf never removes such a directory once
// it is empty, so that the choice does not flip when the last backup goes.
func hasServerDirectory(dir string) bool {
	d, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer d.Close()
	for {
		entries, err := d.ReadDir(256)
		for _, e := range entries {
			if e.IsDir() && ids.IsUUID(e.Name()) {
				return true
			}
		}
		if err != nil {
			return false // io.EOF or a read error: none found
		}
	}
}

// CreateTemp creates a file in the backup directory for an archive being
// written; CommitLocal moves it in place, and CleanTemporaries removes it
// at boot when a crash left it.
func CreateTemp(cfg *config.Config) (*os.File, error) {
	dir := cfg.System.BackupDirectory
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dir, tempPrefix+randomHex()+".tar.gz"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
}

// CommitLocal moves the complete, synced archive tmp (made by CreateTemp)
// to the place of the local backup of server in the layout WriteLayout
// chooses, atomically, and returns that path. On error tmp is left for the
// caller to remove.
func CommitLocal(cfg *config.Config, server, backup, tmp string) (string, error) {
	if !ids.IsUUID(backup) {
		return "", ErrBadUUID
	}
	dir := cfg.System.BackupDirectory
	if WriteLayout(cfg) == LayoutPerServer && ids.IsUUID(server) {
		// Pelican Wings makes it 0700 too.
		if err := os.Mkdir(filepath.Join(dir, server), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("creating the server's backup directory: %w", err)
		}
		p := perServerPath(dir, server, backup)
		return p, atomicfile.Commit(tmp, p)
	}
	if err := atomicfile.WriteFile(ownerPath(dir, backup), []byte(server+"\n"), 0o600); err != nil {
		return "", err
	}
	p := flatPath(dir, backup)
	return p, atomicfile.Commit(tmp, p)
}

// removeLocal removes the archive at p (from LocalPath) and, for a flat
// one, its owner record. An emptied server directory stays (see
// hasServerDirectory).
func removeLocal(cfg *config.Config, p, backup string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing backup: %w", err)
	}
	dir := cfg.System.BackupDirectory
	if p == flatPath(dir, backup) {
		_ = os.Remove(ownerPath(dir, backup))
	}
	return nil
}
