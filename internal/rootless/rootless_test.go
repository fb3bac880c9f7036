package rootless

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/wharf/wharf/internal/config"
)

// engineUID is the engine's user of these tests: an id with no account,
// so that the kernel alone decides what it may do (setpriv).
const engineUID, engineGID = 54337, 54337

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the preparation changes directories' groups, and the checks run as another uid")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux) to act as the engine's user")
	}
}

// asEngine runs a command as engineUID:engineGID with no other group, as
// the rootless engine's process would look at the path.
func asEngine(t *testing.T, args ...string) error {
	t.Helper()
	cmd := exec.Command("setpriv", append([]string{"--reuid", "54337", "--regid", "54337", "--clear-groups", "--"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return errors.New(strings.TrimSpace(string(out)))
	}
	return nil
}

// node lays out a node as prepareHost does (root 0700, data 0755 inside
// it, tmp 0700), under a base any user may enter, with one server's
// directory owned by the engine's user, mode 0700, holding a file.
func node(t *testing.T) (*config.Config, string) {
	t.Helper()
	base, err := os.MkdirTemp("", "wharf-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil { // the parents of base are /tmp (1777) and /
		t.Fatal(err)
	}
	c := config.Defaults()
	c.PlaceUnder(base)
	c.System.Username = "engine"
	c.System.User.UID, c.System.User.GID = engineUID, engineGID
	c.System.User.Rootless = config.Rootless{Enabled: true}
	c.System.User.Passwd.Enable = true
	for _, d := range []struct {
		p    string
		mode os.FileMode
	}{
		{c.System.RootDirectory, 0o700}, {c.System.Data, 0o755}, {c.System.BackupDirectory, 0o700},
		{c.System.TmpDirectory, 0o700}, {c.System.PasswdDirectory(), 0o755},
	} {
		if err := os.MkdirAll(d.p, d.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d.p, d.mode); err != nil {
			t.Fatal(err)
		}
	}
	srv := filepath.Join(c.System.Data, "5e1c0b2e-6a0e-4d5b-9d3c-0f4b3a2c1d00")
	if err := os.Mkdir(srv, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(srv, "server.properties"), []byte("motd=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(srv, engineUID, engineGID); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.System.BackupDirectory, "b.tar.gz"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	return c, srv
}

func stat(t *testing.T, p string) (os.FileMode, uint32, uint32) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fi.Mode().Perm(), st.Uid, st.Gid
}

func has(fs []Finding, l Level, sub string) bool {
	for _, f := range fs {
		if f.Level == l && strings.Contains(f.Text, sub) {
			return true
		}
	}
	return false
}

// allSubIDs is an Options whose subuid/subgid files give the engine's uid
// a full range and whose newuidmap is found.
func allSubIDs(t *testing.T) Options {
	t.Helper()
	dir := t.TempDir()
	line := []byte("54337:200000:65536\n")
	for _, f := range []string{"subuid", "subgid"} {
		if err := os.WriteFile(filepath.Join(dir, f), line, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Options{SubUIDFile: filepath.Join(dir, "subuid"), SubGIDFile: filepath.Join(dir, "subgid"),
		LookPath: func(s string) (string, error) { return "/usr/bin/" + s, nil }}
}

// TestPrepareLetsTheEngineEnterServerDirectories: the engine's user cannot
// reach a server's directory, the script directory's parent or the passwd
// files through Wharf's root-owned 0700 directories (control); Check says
// Wharf will fix it and changes nothing; after Prepare it can, and it
// still cannot list the root directory, enter the backups or write
// anywhere it could not; nothing is open to others.
func TestPrepareLetsTheEngineEnterServerDirectories(t *testing.T) {
	requireRoot(t)
	c, srv := node(t)
	u := User{UID: engineUID, GID: engineGID, Groups: []int{engineGID}}
	file := filepath.Join(srv, "server.properties")
	passwdDir := c.System.PasswdDirectory()

	// Control: this is what rootless Podman hits (issue 37, item 6).
	if err := asEngine(t, "cat", file); err == nil {
		t.Fatal("control: the engine's user reads a server's file through the root-owned 0700 root directory before any preparation")
	}
	if err := asEngine(t, "test", "-x", c.System.TmpDirectory); err == nil {
		t.Fatal("control: the engine's user enters the 0700 tmp directory before any preparation")
	}

	rootMode, _, _ := stat(t, c.System.RootDirectory)
	found := Check(c, u, allSubIDs(t))
	if !has(found, WharfFixes, c.System.RootDirectory) || !has(found, WharfFixes, c.System.TmpDirectory) {
		t.Fatalf("Check does not say Wharf fixes the root and tmp directories:\n%v", found)
	}
	if p := Problems(found); len(p) != 0 {
		t.Fatalf("problems on a node Wharf can prepare alone: %v", p)
	}
	if m, _, _ := stat(t, c.System.RootDirectory); m != rootMode {
		t.Fatalf("Check changed the root directory's mode: %04o", m)
	}

	found, err := Prepare(c, u, allSubIDs(t))
	if err != nil {
		t.Fatal(err)
	}
	if !has(found, Fixed, c.System.RootDirectory) || !has(found, Fixed, c.System.TmpDirectory) {
		t.Fatalf("Prepare does not report its changes:\n%v", found)
	}
	for _, d := range []string{c.System.RootDirectory, c.System.TmpDirectory} {
		m, uid, gid := stat(t, d)
		if m != 0o710 || uid != 0 || gid != engineGID {
			t.Errorf("%s is %04o %d:%d, want 0710 0:%d", d, m, uid, gid, engineGID)
		}
	}
	if err := asEngine(t, "cat", file); err != nil {
		t.Errorf("the engine's user still cannot read its server's file: %v", err)
	}
	if err := asEngine(t, "cat", filepath.Join(passwdDir, ".")); err != nil && !strings.Contains(err.Error(), "Is a directory") {
		t.Errorf("the engine's user cannot reach the passwd directory: %v", err)
	}
	if err := asEngine(t, "test", "-x", c.System.TmpDirectory); err != nil {
		t.Errorf("the engine's user cannot enter the tmp directory: %v", err)
	}
	// What it must still not do.
	if err := asEngine(t, "ls", c.System.RootDirectory); err == nil {
		t.Error("the engine's user lists the root directory")
	}
	if err := asEngine(t, "cat", filepath.Join(c.System.BackupDirectory, "b.tar.gz")); err == nil {
		t.Error("the engine's user reads a backup")
	}
	if err := asEngine(t, "touch", filepath.Join(c.System.RootDirectory, "x")); err == nil {
		t.Error("the engine's user writes in the root directory")
	}
	if err := asEngine(t, "touch", filepath.Join(c.System.TmpDirectory, "x")); err == nil {
		t.Error("the engine's user writes in the tmp directory")
	}
	if m, _, gid := stat(t, c.System.BackupDirectory); m != 0o700 || gid != 0 {
		t.Errorf("the backup directory changed: %04o group %d", m, gid)
	}
	if m, uid, _ := stat(t, srv); m != 0o700 || uid != engineUID {
		t.Errorf("the server's directory changed: %04o owner %d", m, uid)
	}
	// Idempotent: the next boot changes nothing.
	found, err = Prepare(c, u, allSubIDs(t))
	if err != nil || has(found, Fixed, "") {
		t.Errorf("a second Prepare changed something (%v):\n%v", err, found)
	}
}

// TestPrepareLeavesWhatIsNotWharfs: a parent directory Wharf does not own
// (here: the base of the node, 0700) and a directory of Wharf's whose
// group already has access are not changed; the findings say what the
// operator must run.
func TestPrepareLeavesWhatIsNotWharfs(t *testing.T) {
	requireRoot(t)
	c, _ := node(t)
	base := filepath.Dir(c.System.RootDirectory)
	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(c.System.TmpDirectory, 0, 4); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(c.System.TmpDirectory, 0o750); err != nil {
		t.Fatal(err)
	}
	u := User{UID: engineUID, GID: engineGID, Groups: []int{engineGID}}
	found, err := Prepare(c, u, allSubIDs(t))
	if err != nil {
		t.Fatal(err)
	}
	if !has(found, Operator, "cannot enter "+base+" ") || !has(found, Operator, "chmod o+x "+base) {
		t.Errorf("no problem naming the parent Wharf does not own and what to run:\n%v", found)
	}
	if !has(found, Operator, "cannot enter "+c.System.TmpDirectory+" ") {
		t.Errorf("no problem naming the tmp directory whose group has access:\n%v", found)
	}
	if m, _, _ := stat(t, base); m != 0o700 {
		t.Errorf("the parent changed: %04o", m)
	}
	if m, _, gid := stat(t, c.System.TmpDirectory); m != 0o750 || gid != 4 {
		t.Errorf("the tmp directory changed: %04o group %d", m, gid)
	}
}

// TestCheckSubordinateIDsAndUser: no subuid/subgid range, a short one,
// newuidmap missing, system.username not the engine's user and rootless
// mode off are each a problem that says what to run or set.
func TestCheckSubordinateIDsAndUser(t *testing.T) {
	c := config.Defaults()
	c.PlaceUnder(t.TempDir())
	c.System.Username = "pterodactyl"
	c.System.User.UID, c.System.User.GID = 998, 998
	dir := t.TempDir()
	sub := filepath.Join(dir, "subuid")
	if err := os.WriteFile(sub, []byte("someoneelse:100000:65536\n54337:300000:1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u := User{UID: engineUID, GID: engineGID, Name: "podman"}
	found := Check(c, u, Options{SubUIDFile: sub, SubGIDFile: filepath.Join(dir, "missing"),
		LookPath: func(s string) (string, error) { return "", exec.ErrNotFound }})
	for _, want := range []string{
		"only 1000 subordinate uids",
		"no subordinate gids for podman (uid 54337): run usermod --add-subgids 100000-165535 podman",
		"newuidmap is not installed (Debian: apt-get install uidmap)",
		"set system.username: podman",
		"set system.user.rootless.enabled: true",
	} {
		if !has(found, Operator, want) {
			t.Errorf("no problem %q in:\n%v", want, found)
		}
	}
	if err := os.WriteFile(sub, []byte("# comment\npodman:100000:65536\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	found = Check(c, u, Options{SubUIDFile: sub, SubGIDFile: sub, LookPath: func(s string) (string, error) { return s, nil }})
	if !has(found, OK, "65536 subordinate uids") || has(found, Operator, "subordinate uids") || has(found, Operator, "subordinate gids") {
		t.Errorf("a range by name is not found:\n%v", found)
	}
}

// TestEngineUser: the engine's user is its socket's owner; a socket of
// root, a TCP address and a missing socket are errors that say why.
func TestEngineUser(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "podman.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if os.Geteuid() == 0 {
		if _, err := EngineUser("unix://" + sock); err == nil || !strings.Contains(err.Error(), "belongs to root") {
			t.Errorf("a root-owned socket: %v", err)
		}
		if err := os.Chown(sock, engineUID, engineGID); err != nil {
			t.Fatal(err)
		}
	}
	u, err := EngineUser("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	if want := os.Geteuid(); want == 0 && u.UID != engineUID || want != 0 && u.UID != want {
		t.Errorf("engine user %+v", u)
	}
	if _, err := EngineUser("tcp://127.0.0.1:2375"); err == nil || !strings.Contains(err.Error(), "not a unix socket") {
		t.Errorf("tcp: %v", err)
	}
	if _, err := EngineUser("unix://" + filepath.Join(dir, "none.sock")); err == nil {
		t.Error("a missing socket is no error")
	}
}
