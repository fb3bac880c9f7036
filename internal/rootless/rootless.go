// Package rootless prepares the node for a rootless container engine
// (issue 37): such an engine checks every bind-mount source as its own
// user, so that user must be able to enter each directory Wharf mounts
// from (the server directories under system.data, the install scripts
// under system.tmp_directory, the passwd and machine-id directories), and
// it needs subordinate ids (/etc/subuid, /etc/subgid) and newuidmap.
//
// Check says, for each of these, whether it holds, whether Wharf fixes it
// at boot, or what the operator must do; Prepare applies Wharf's fixes.
// A fix is only ever a directory of Wharf's own configuration that the
// engine's user cannot enter and whose group has no access today: its
// group becomes the engine user's group, with search permission only
// (g=x, never read or write, never anything for others). Directories
// Wharf does not own (/var/lib, the parents of a custom path) are never
// changed: the report names them and what to do. The server directories
// stay owned by system.username, mode 0700: a container only ever has its
// own server's directory mounted, so servers cannot read each other's.
package rootless

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/wharf/wharf/internal/config"
)

// User is the account a rootless engine runs as.
type User struct {
	UID, GID int
	Name     string // empty when the uid has no account
	Groups   []int  // supplementary groups, with GID
}

// SocketPath is the path of the engine's unix socket in host (a
// docker.host / DOCKER_HOST value), or "" when host is not a unix socket.
func SocketPath(host string) string {
	p, ok := strings.CutPrefix(host, "unix://")
	if !ok || p == "" {
		return ""
	}
	return p
}

// EngineUser finds the user of a rootless engine: the owner of its unix
// socket (rootless Podman's is /run/user/<uid>/podman/podman.sock, made by
// that user). host is docker.host, else DOCKER_HOST.
func EngineUser(host string) (User, error) {
	sock := SocketPath(host)
	if sock == "" {
		return User{}, fmt.Errorf("the engine's address %q is not a unix socket, so Wharf cannot tell which user the rootless engine runs as", host)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		return User{}, fmt.Errorf("the engine's socket: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return User{}, errors.New("the engine's socket has no owner on this system")
	}
	if st.Uid == 0 {
		return User{}, fmt.Errorf("the engine's socket %s belongs to root, so Wharf cannot tell which user the rootless engine runs as", sock)
	}
	return LookupUser(int(st.Uid), int(st.Gid)), nil
}

// LookupUser describes uid: its name and groups when it has an account,
// else gid alone.
func LookupUser(uid, gid int) User {
	u := User{UID: uid, GID: gid, Groups: []int{gid}}
	acct, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return u
	}
	u.Name = acct.Username
	if g, err := strconv.Atoi(acct.Gid); err == nil {
		u.GID = g
		u.Groups = []int{g}
	}
	if ids, err := acct.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.Atoi(s); err == nil && !slices.Contains(u.Groups, g) {
				u.Groups = append(u.Groups, g)
			}
		}
	}
	return u
}

// Level says who acts on a Finding.
type Level string

const (
	// OK: nothing to do.
	OK Level = "ok"
	// Fixed: Prepare changed it.
	Fixed Level = "fixed"
	// WharfFixes: Check found it; Prepare (at boot) fixes it.
	WharfFixes Level = "wharf fixes at boot"
	// Operator: Wharf cannot fix it; the text says what to do.
	Operator Level = "PROBLEM"
)

// Finding is one thing a rootless engine needs, and its state.
type Finding struct {
	Level Level
	Text  string
}

func (f Finding) String() string { return string(f.Level) + ": " + f.Text }

// Options are the files Check reads (the defaults are the host's).
type Options struct {
	SubUIDFile, SubGIDFile string // /etc/subuid, /etc/subgid
	// LookPath finds newuidmap/newgidmap (exec.LookPath when nil).
	LookPath func(string) (string, error)
}

func (o Options) withDefaults() Options {
	if o.SubUIDFile == "" {
		o.SubUIDFile = "/etc/subuid"
	}
	if o.SubGIDFile == "" {
		o.SubGIDFile = "/etc/subgid"
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	return o
}

// Check reports what the engine's user u needs of the node, changing
// nothing.
func Check(cfg *config.Config, u User, opts Options) []Finding {
	out, _ := run(cfg, u, opts, false)
	return out
}

// Prepare applies the fixes Check reports as WharfFixes and returns the
// findings after them (Fixed where it changed something). The error is
// that of a change that failed (also in the findings, as Operator).
func Prepare(cfg *config.Config, u User, opts Options) ([]Finding, error) {
	return run(cfg, u, opts, true)
}

// Problems are the findings the operator must act on.
func Problems(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Level == Operator {
			out = append(out, f)
		}
	}
	return out
}

func run(cfg *config.Config, u User, opts Options, apply bool) ([]Finding, error) {
	opts = opts.withDefaults()
	s := cfg.System
	var out []Finding
	var errs []error
	add := func(l Level, format string, a ...any) { out = append(out, Finding{l, fmt.Sprintf(format, a...)}) }
	who := fmt.Sprintf("uid %d", u.UID)
	if u.Name != "" {
		who = fmt.Sprintf("%s (uid %d)", u.Name, u.UID)
	}

	// The server files belong to system.username; the engine's user must
	// be that user, and the container's root its own uid.
	if s.User.UID != u.UID {
		add(Operator, "system.username %q (uid %d) is not the engine's user %s: server directories belong to system.username (mode 0700) and the engine cannot mount them; set system.username: %s",
			s.Username, s.User.UID, who, nameOr(u))
	} else {
		add(OK, "system.username %q is the engine's user", s.Username)
	}
	if !s.User.Rootless.Enabled {
		add(Operator, "system.user.rootless.enabled is false: the game would run as uid %d inside the engine's user namespace, a subordinate id that cannot write the server's files; set system.user.rootless.enabled: true (container_uid and container_gid 0: the container's root is the engine's user on the host)", s.User.UID)
	}

	// Every directory the engine mounts from, and each of its parents,
	// must let the engine's user search it.
	own := map[string]bool{}
	var sources []string
	for _, d := range []struct {
		path string
		on   bool
	}{
		{s.RootDirectory, true}, {s.Data, true}, {s.TmpDirectory, true},
		{s.PasswdDirectory(), s.User.Passwd.Enable}, {s.MachineIDDirectory(), s.MachineID.Enable},
	} {
		if d.path == "" || !d.on {
			continue
		}
		p := filepath.Clean(d.path)
		own[p] = true
		if p != filepath.Clean(s.RootDirectory) {
			sources = append(sources, p)
		}
	}
	seen := map[string]bool{}
	for _, src := range sources {
		for _, dir := range ancestors(src) {
			if seen[dir] {
				continue
			}
			seen[dir] = true
			f, err := searchable(dir, u, own[dir], apply)
			if err != nil {
				errs = append(errs, err)
			}
			if f.Text != "" {
				out = append(out, f)
			}
		}
	}
	add(OK, "each install's script directory (under %s) is made owned by system.username, mode 0700, while the installer runs", s.TmpDirectory)

	// Subordinate ids and the setuid helpers that map them.
	for _, f := range []struct{ file, kind, flag string }{
		{opts.SubUIDFile, "uids", "--add-subuids"}, {opts.SubGIDFile, "gids", "--add-subgids"},
	} {
		n, err := subordinate(f.file, u)
		switch {
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			add(Operator, "cannot read %s: %v", f.file, err)
		case n == 0:
			add(Operator, "%s has no subordinate %s for %s: run usermod %s 100000-165535 %s (a range no other user has), then podman system migrate as that user",
				f.file, f.kind, who, f.flag, nameOr(u))
		case n < 65536:
			add(Operator, "%s gives %s only %d subordinate %s: images with ids above %d fail to unpack; give it 65536 (usermod %s)", f.file, who, n, f.kind, n-1, f.flag)
		default:
			add(OK, "%s has %d subordinate %s for %s", f.file, n, f.kind, who)
		}
	}
	for _, bin := range []string{"newuidmap", "newgidmap"} {
		if _, err := opts.LookPath(bin); err != nil {
			add(Operator, "%s is not installed (Debian: apt-get install uidmap)", bin)
		}
	}
	return out, errors.Join(errs...)
}

func nameOr(u User) string {
	if u.Name != "" {
		return u.Name
	}
	return "<the engine's user>"
}

// ancestors lists "/" .. p, p last.
func ancestors(p string) []string {
	var out []string
	for d := p; ; d = filepath.Dir(d) {
		out = append(out, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	slices.Reverse(out)
	return out
}

// searchable checks that u may search dir and, for a directory of Wharf's
// own (own) that it may not, fixes it when apply is set. It returns a
// Finding with no text when there is nothing to say (a parent that is
// fine).
func searchable(dir string, u User, own, apply bool) (Finding, error) {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if own {
			return Finding{OK, fmt.Sprintf("%s does not exist yet: Wharf creates it", dir)}, nil
		}
		return Finding{}, nil
	}
	if err != nil {
		return Finding{Operator, fmt.Sprintf("cannot inspect %s: %v", dir, err)}, nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Finding{}, nil
	}
	mode := fi.Mode().Perm()
	if CanSearch(u, int(st.Uid), int(st.Gid), mode) {
		if own {
			return Finding{OK, fmt.Sprintf("%s (%04o, %d:%d) lets the engine's user enter it", dir, mode, st.Uid, st.Gid)}, nil
		}
		return Finding{}, nil
	}
	fixable := own && (int(st.Gid) == u.GID || mode&0o070 == 0)
	if !fixable {
		why := "it is not Wharf's own directory"
		if own {
			why = fmt.Sprintf("its group %d already has access that the engine's group must not get", st.Gid)
		}
		return Finding{Operator, fmt.Sprintf("the engine's user (uid %d) cannot enter %s (%04o, %d:%d) and Wharf does not change it (%s): run chgrp %d %s && chmod g+x %s, or chmod o+x %s",
			u.UID, dir, mode, st.Uid, st.Gid, why, u.GID, dir, dir, dir)}, nil
	}
	next := mode | 0o010
	if !apply {
		return Finding{WharfFixes, fmt.Sprintf("%s (%04o, %d:%d) becomes group %d, mode %04o: the engine's user may enter it, not list or change it", dir, mode, st.Uid, st.Gid, u.GID, next)}, nil
	}
	if err := os.Lchown(dir, -1, u.GID); err != nil {
		return Finding{Operator, fmt.Sprintf("cannot give %s to group %d: %v", dir, u.GID, err)}, fmt.Errorf("rootless: %s: %w", dir, err)
	}
	if err := os.Chmod(dir, next); err != nil {
		return Finding{Operator, fmt.Sprintf("cannot chmod %s: %v", dir, err)}, fmt.Errorf("rootless: %s: %w", dir, err)
	}
	return Finding{Fixed, fmt.Sprintf("%s (was %04o, %d:%d) is now group %d, mode %04o: the engine's user may enter it, not list or change it", dir, mode, st.Uid, st.Gid, u.GID, next)}, nil
}

// CanSearch reports whether u may search (x) a directory of that owner,
// group and mode, by the owner/group/other classes.
func CanSearch(u User, uid, gid int, mode fs.FileMode) bool {
	switch {
	case u.UID == 0:
		return true
	case uid == u.UID:
		return mode&0o100 != 0
	case slices.Contains(u.Groups, gid) || gid == u.GID:
		return mode&0o010 != 0
	default:
		return mode&0o001 != 0
	}
}

// subordinate is the number of subordinate ids file gives u (by name or
// uid); 0 when none.
func subordinate(file string, u User) (int, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	total := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(parts) != 3 || strings.HasPrefix(parts[0], "#") {
			continue
		}
		if parts[0] != strconv.Itoa(u.UID) && (u.Name == "" || parts[0] != u.Name) {
			continue
		}
		if n, err := strconv.Atoi(parts[2]); err == nil && n > 0 {
			total += n
		}
	}
	return total, sc.Err()
}
