package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/wharf/wharf/internal/config"
)

// prepareHost creates the directories, makes sure the system user exists and
// fills in the values detected at boot (owner uid/gid, timezone). It returns
// the configuration to persist, or nil when nothing changed.
func prepareHost(cfg *config.Config, log *slog.Logger) (*config.Config, error) {
	dirs := []struct {
		path string
		mode os.FileMode
	}{
		{cfg.System.RootDirectory, 0o700},
		{cfg.System.LogDirectory, 0o700},
		{filepath.Join(cfg.System.LogDirectory, "install"), 0o700},
		{cfg.System.Data, 0o755},
		{cfg.System.ArchiveDirectory, 0o700},
		{cfg.System.BackupDirectory, 0o700},
		{cfg.System.TmpDirectory, 0o700},
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d.path, err)
		}
	}

	uid, gid, err := ensureUser(cfg.System.Username, log)
	if err != nil {
		return nil, err
	}
	tz := cfg.System.Timezone
	if tz == "" {
		tz = detectTimezone()
	}
	if uid == cfg.System.User.UID && gid == cfg.System.User.GID && tz == cfg.System.Timezone {
		return nil, nil
	}
	next := cfg.Clone()
	next.System.User.UID, next.System.User.GID = uid, gid
	next.System.Timezone = tz
	return next, nil
}

// ensureUser looks the system user up, creating it when running as root.
func ensureUser(name string, log *slog.Logger) (int, int, error) {
	u, err := user.Lookup(name)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) && os.Geteuid() == 0 {
		log.Info("creating the system user", "username", name)
		out, cerr := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
		if cerr != nil {
			return 0, 0, fmt.Errorf("creating system user %q: %v: %s", name, cerr, strings.TrimSpace(string(out)))
		}
		u, err = user.Lookup(name)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("system user %q: %w (create it, or set system.username)", name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("system user %q has non-numeric ids", name)
	}
	return uid, gid, nil
}

// detectTimezone: TZ, then /etc/timezone, then the /etc/localtime link, then UTC.
func detectTimezone() string {
	valid := func(tz string) bool {
		tz = strings.TrimSpace(tz)
		if tz == "" {
			return false
		}
		_, err := time.LoadLocation(tz)
		return err == nil
	}
	if tz := os.Getenv("TZ"); valid(tz) {
		return strings.TrimSpace(tz)
	}
	if data, err := os.ReadFile("/etc/timezone"); err == nil && valid(string(data)) {
		return strings.TrimSpace(string(data))
	}
	if target, err := os.Readlink("/etc/localtime"); err == nil {
		if i := strings.Index(target, "zoneinfo/"); i >= 0 && valid(target[i+len("zoneinfo/"):]) {
			return target[i+len("zoneinfo/"):]
		}
	}
	return "UTC"
}
