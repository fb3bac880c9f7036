package daemon

import (
	"log/slog"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/quota"
)

// openQuotas turns on kernel disk quotas when system.quotas.enabled asks
// for them and the data directory's filesystem enforces project quotas.
// Otherwise it says so in one line and returns nil: the disk limits are
// then the daemon's own, as without the setting.
func openQuotas(log *slog.Logger, c *config.Config) *quota.Quotas {
	if !c.System.Quotas.Enabled {
		// Said at boot, so that the operator knows the better path exists
		// (issue 32): the kernel refuses the game's writes past the limit.
		if err := quota.Available(c.System.Data); err == nil {
			log.Info("kernel project quotas are available on the data directory's filesystem but off: set system.quotas.enabled for the kernel to refuse a game's writes past its disk limit; until then Wharf's disk monitor stops such a server", "data", c.System.Data, "disk_check_interval", c.System.DiskCheckInterval)
		} else {
			log.Info("disk limits are held by Wharf's disk monitor (kernel project quotas are not available on the data directory's filesystem)", "data", c.System.Data, "disk_check_interval", c.System.DiskCheckInterval, "reason", err)
		}
		return nil
	}
	q, err := quota.Open(c.System.Data)
	if err != nil {
		log.Warn("system.quotas is enabled but kernel disk quotas are off: a game's own writes are held to its disk limit only by the periodic usage check", "error", err)
		return nil
	}
	log.Info("kernel disk quotas on: the filesystem holds every server to its disk limit", "data", c.System.Data)
	return q
}
