package config

import "fmt"

// RootlessEngineNeeds lists what a rootless engine needs of the node: it
// checks bind-mount sources as its own user, so that user must be able to
// enter each directory Wharf mounts from.
func (c *Config) RootlessEngineNeeds() []string {
	s := c.System
	needs := []string{
		fmt.Sprintf("the engine's user can enter %s (system.root_directory) and %s (system.data): owner, or o+x on each", s.RootDirectory, s.Data),
		fmt.Sprintf("the engine's user can read the install scripts under %s (system.tmp_directory)", s.TmpDirectory),
		"system.username is the engine's user and system.user.rootless.enabled is true, so that server files belong to it",
		"the engine's user has ranges in /etc/subuid and /etc/subgid (usermod --add-subuids/--add-subgids) and newuidmap/newgidmap are installed (uidmap)",
		"the host runs cgroup v2 with the memory, cpu and pids controllers delegated to the user (systemd: Delegate=yes on user@.service)",
	}
	if s.User.Passwd.Enable {
		needs = append(needs, fmt.Sprintf("the engine's user can read %s (system.passwd.directory)", s.User.Passwd.Directory))
	}
	if s.MachineID.Enable {
		needs = append(needs, fmt.Sprintf("the engine's user can read %s (system.machine_id.directory)", s.MachineID.Directory))
	}
	return needs
}
