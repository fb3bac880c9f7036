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
