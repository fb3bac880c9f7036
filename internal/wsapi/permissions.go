package wsapi

import "strings"

// The permission strings a websocket token may carry (wings-facts §4.2), in
// the spec's spelling. admin.websocket.install and admin.websocket.transfer
// are accepted as synonyms of websocket.install and websocket.transfer.
const (
	PermConnect       = "websocket.connect"
	PermConsole       = "control.console"
	PermStart         = "control.start"
	PermStop          = "control.stop"
	PermRestart       = "control.restart"
	PermInstall       = "websocket.install"
	PermTransfer      = "websocket.transfer"
	PermBackupRead    = "backup.read"
	PermDetailedError = "admin.websocket.errors"
)

// permissions is the normalised permission set of one token.
type permissions struct {
	all bool // "*": everything but the admin permissions
	set map[string]bool
}

func newPermissions(list []string) permissions {
	p := permissions{set: make(map[string]bool, len(list))}
	for _, s := range list {
		switch s {
		case "*":
			p.all = true
		case "admin.websocket.install":
			p.set[PermInstall] = true
		case "admin.websocket.transfer":
			p.set[PermTransfer] = true
		default:
			p.set[s] = true
		}
	}
	return p
}

// has reports whether the permission is granted. "*" grants every
// permission except admin.websocket.errors, which must be named.
func (p permissions) has(perm string) bool {
	if p.set[perm] {
		return true
	}
	return p.all && !strings.HasPrefix(perm, "admin.")
}

// powerPermission is the permission a power action needs.
func powerPermission(action string) string {
	switch action {
	case "start":
		return PermStart
	case "stop", "kill":
		return PermStop
	case "restart":
		return PermRestart
	}
	return ""
}

// eventPermission is the permission needed to receive an outbound event;
// "" means any authenticated socket receives it.
func eventPermission(name string) string {
	switch {
	case name == "install output":
		return PermInstall
	case name == "transfer logs":
		return PermTransfer
	case name == "backup completed", strings.HasPrefix(name, "backup completed:"), name == "backup restore completed":
		return PermBackupRead
	}
	return ""
}
