package e2e

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/testutil/wait"

	"github.com/wharf/wharf/internal/devpanel"
)

// walkDepth is how deep the game's tree goes: the path of its bottom file
// (5,000 bytes) is longer than PATH_MAX, and a walk holding a descriptor
// per level would need ten times the daemon's limit below.
const walkDepth = 2500

// daemonFDLimit is the descriptor limit the daemon runs under in these
// tests: well above what it needs to serve, far below one per level.
const daemonFDLimit = 256

// limitFDs sets the running daemon's descriptor limit: soft to limit, hard
// to daemonFDLimit (so that the soft one can be raised again).
func (n *node) limitFDs(t *testing.T, limit uint64) {
	t.Helper()
	lim := unix.Rlimit{Cur: limit, Max: daemonFDLimit}
	if err := unix.Prlimit(n.cmd.Process.Pid, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Fatal(err)
	}
	// Control: the kernel applies it to the daemon.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", n.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("Max open files            %-20d %-20d", limit, daemonFDLimit)
	if !strings.Contains(string(b), want) {
		t.Fatalf("the daemon's limits do not show %q:\n%s", want, b)
	}
}

// makeDeepTree makes what a game process can make in its directory:
// depth directories "d" one in the other under dir (each made relative to
// its parent's descriptor, the full path being too long for the kernel),
// with a file and an empty directory next to every "d", and "bottom.txt"
// at the end. It
// returns the bottom file's path relative to dir.
func makeDeepTree(t *testing.T, dir string, depth int, bottom string) string {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	write := func(at int, name, data string) {
		f, err := unix.Openat(at, name, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(f)
		if _, err := unix.Write(f, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range depth {
		write(fd, "f", fmt.Sprint(i))
		// An empty directory listed before "d": a walk that keeps a
		// directory open until all its subdirectories are taken holds
		// every level of the chain.
		if err := unix.Mkdirat(fd, "a", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		_ = unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	write(fd, "bottom.txt", bottom)
	_ = unix.Close(fd)
	return strings.Repeat("d/", depth) + "bottom.txt"
}

// tarFileContent returns the contents of the regular file name in the first tar
// stream of the gzip archive at p.
func tarFileContent(t *testing.T, p, name string) (string, bool) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name && h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return string(b), true
		}
	}
}

// A game makes a tree 2,500 levels deep and the daemon is at a descriptor
// limit of 256: compress of the root answers 200 only with an archive
// that holds the file at the bottom (never a partial archive), and a
// backup either holds it or is reported failed to the panel. Afterwards
// the daemon holds no more descriptors than before and answers on every
// face.
func TestWalksOfADeepTreeAtTheDescriptorLimit(t *testing.T) {
	n := filesNode(t, 200, func(s *devpanel.Server) {
		s.Settings["egg"] = map[string]any{"id": "1", "file_denylist": []string{}}
	})
	bottom := makeDeepTree(t, n.dataDir(filesServer), walkDepth, "the bottom of the tree")
	// Control: the tree is really there, as deep as said.
	if _, err := os.Stat(filepath.Join(n.dataDir(filesServer), strings.Repeat("d/", 100))); err != nil {
		t.Fatal(err)
	}
	n.limitFDs(t, daemonFDLimit)
	before := n.openFDs()

	res, body := n.files("POST", "compress", map[string]any{"root": "/", "files": []string{"d"}, "name": "deep"})
	archive := n.fpath("deep.tar.gz")
	t.Logf("compress: %d %.200s", res.StatusCode, body)
	switch {
	case res.StatusCode == 200:
		if got, ok := tarFileContent(t, archive, bottom); !ok || got != "the bottom of the tree" {
			t.Errorf("compress answered 200 with an archive that lacks the bottom file (found %v, %q)", ok, got)
		}
	case res.StatusCode >= 500:
		t.Fatalf("compress: %d %s", res.StatusCode, body)
	default:
		if !strings.Contains(string(body), "Cannot read /d/") {
			t.Fatalf("compress failed without naming the path: %d %s", res.StatusCode, body)
		}
		if _, err := os.Stat(archive); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a failed compress left its archive behind: %v", err)
		}
	}

	id := newBackupID()
	res, body = n.request("POST", "/api/servers/"+filesServer+"/backup", map[string]any{"adapter": "local", "uuid": id}, "")
	if res.StatusCode != 202 {
		t.Fatalf("backup: %d %s", res.StatusCode, body)
	}
	st := n.waitBackupStatus(id, 3*time.Minute)
	backup := filepath.Join(n.Config.System.BackupDirectory, id+".tar.gz")
	t.Logf("backup successful: %v", st.Successful)
	if st.Successful {
		if got, ok := tarFileContent(t, backup, bottom); !ok || got != "the bottom of the tree" {
			t.Errorf("the backup was reported successful but lacks the bottom file (found %v, %q)", ok, got)
		}
	} else if !strings.Contains(n.log.String(), "backup failed") {
		t.Fatalf("the backup failed without saying why in the log:\n%s", n.log)
	}

	// The walks gave back every descriptor they took.
	if !wait.Until(20*time.Second, func() bool { return n.openFDs() <= before+2 }) {
		t.Fatalf("the daemon holds %d descriptors after the walks, %d before", n.openFDs(), before)
	}
	n.assertAnswersEveryFace(t, filesServer)
}

// The same tree under a server whose egg has a denylist: the compress
// walk cannot name the bottom file to the kernel (its path is longer than
// PATH_MAX), so it cannot check it against the denylist; compress then
// fails with a message that says so, and never answers 200 without it.
func TestCompressOfATreeTooDeepToCheckFailsClearly(t *testing.T) {
	n := filesNode(t, 200, nil)
	bottom := makeDeepTree(t, n.dataDir(filesServer), walkDepth, "the bottom of the tree")
	n.limitFDs(t, daemonFDLimit)
	res, body := n.files("POST", "compress", map[string]any{"root": "/", "files": []string{"d"}, "name": "deep"})
	t.Logf("compress: %d %.200s", res.StatusCode, body)
	if res.StatusCode == 200 {
		if got, ok := tarFileContent(t, n.fpath("deep.tar.gz"), bottom); !ok || got != "the bottom of the tree" {
			t.Fatalf("compress answered 200 with an archive that lacks the bottom file")
		}
	} else {
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		if res.StatusCode != 400 || !strings.Contains(e.Error, "too deep") || !strings.Contains(e.Error, "/d/d/d/") {
			t.Fatalf("compress: %d %s", res.StatusCode, body)
		}
		if _, err := os.Stat(n.fpath("deep.tar.gz")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a failed compress left its archive behind: %v", err)
		}
	}
	n.assertAnswersEveryFace(t, filesServer)
}

// limitFreeFDs sets the daemon's descriptor limit so that only free
// descriptor numbers are left below it (the kernel gives the lowest free
// number, and refuses one at or above the limit).
func (n *node) limitFreeFDs(t *testing.T, free int) {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", n.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	used := map[int]bool{}
	for _, e := range entries {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err == nil {
			used[fd] = true
		}
	}
	limit := 0
	for ; free > 0; limit++ {
		if !used[limit] {
			free--
		}
	}
	n.limitFDs(t, uint64(limit))
}

// With the daemon so short of descriptors that even a bounded walk cannot
// open the directories it needs, compress fails with an answer that names
// the directory it could not read (and leaves no archive behind), and a
// backup is reported failed to the panel, the path in the node's log:
// neither pretends to have covered the tree.
func TestWalksThatCannotReadTheTreeFail(t *testing.T) {
	n := filesNode(t, 200, func(s *devpanel.Server) {
		s.Settings["egg"] = map[string]any{"id": "1", "file_denylist": []string{}}
	})
	makeDeepTree(t, n.dataDir(filesServer), 200, "the bottom of the tree")
	// A few descriptors free: the request's connection and the archive
	// fit, the walk's held levels (heldLevels is 16) do not.
	n.limitFreeFDs(t, 8)

	res, body := n.files("POST", "compress", map[string]any{"root": "/", "files": []string{"d"}, "name": "deep"})
	var e struct{ Error string }
	_ = json.Unmarshal(body, &e)
	t.Logf("compress: %d %.200s", res.StatusCode, body)
	if res.StatusCode != 409 || !strings.HasPrefix(e.Error, "Cannot read /d/") || !strings.Contains(e.Error, "too many open files") {
		t.Errorf("compress short of descriptors: %d %s", res.StatusCode, body)
	}
	if _, err := os.Stat(n.fpath("deep.tar.gz")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed compress left its archive behind: %v", err)
	}

	id := newBackupID()
	res, body = n.request("POST", "/api/servers/"+filesServer+"/backup", map[string]any{"adapter": "local", "uuid": id}, "")
	if res.StatusCode != 202 {
		t.Fatalf("backup: %d %s", res.StatusCode, body)
	}
	if st := n.waitBackupStatus(id, 3*time.Minute); st.Successful {
		t.Errorf("a backup that could not read the tree was reported successful")
	}
	if left, _ := filepath.Glob(filepath.Join(n.Config.System.BackupDirectory, "*.tar.gz")); len(left) > 0 {
		t.Errorf("a failed backup left archives behind: %v", left)
	}
	// The log reaches the test through a pipe: it may trail the panel call.
	var log string
	wait.Until(10*time.Second, func() bool { log = n.log.String(); return strings.Contains(log, "backup failed") })
	if !strings.Contains(log, "backup failed") || !strings.Contains(log, "/d/d/d/") {
		i := strings.Index(log, "backup failed")
		t.Errorf("the node's log does not name the path the backup could not read:\n%.2000s", log[max(i, 0):])
	}

	n.limitFDs(t, daemonFDLimit)
	n.assertAnswersEveryFace(t, filesServer)
}

// readDeep reads the file at the bottom of a tree makeDeepTree made under
// dir, one directory at a time (its path is too long for the kernel).
func readDeep(t *testing.T, dir string, depth int) (string, error) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	for range depth {
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		_ = unix.Close(fd)
		if err != nil {
			return "", err
		}
		fd = next
	}
	defer unix.Close(fd)
	f, err := unix.Openat(fd, "bottom.txt", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(f)
	buf := make([]byte, 256)
	n, err := unix.Read(f, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// A transfer (classic and live) of a server whose game made a deep tree,
// from a source at a descriptor limit of 256: the target either reports
// success and has the file at the bottom, or the transfer is reported
// failed; never a success without the subtree. The live transfer's tree
// is 2,000 levels deep, so that its names fit the live wire (4,096 bytes;
// a deeper one fails at the source with a message naming the path).
func TestTransferOfADeepTreeAtTheDescriptorLimit(t *testing.T) {
	for i, live := range []bool{false, true} {
		// Four times the source's descriptor limit: deep enough that a walk
		// holding a descriptor per level fails, or an extraction holding
		// one per level at the target (it holds at most 64).
		depth := 4 * daemonFDLimit
		if live {
			depth = 2000
		}
		t.Run(fmt.Sprintf("live=%v", live), func(t *testing.T) {
			id := fmt.Sprintf("7a0000d%d-0000-4000-8000-0000000000d%d", i, i)
			mutate := func(name string, c *config.Config) {
				// Each node its own SFTP port: the survival check dials it.
				c.System.SFTP.BindAddress, c.System.SFTP.BindPort = "127.0.0.1", freePort(t)
				if live {
					liveNodes(0)(name, c)
				}
			}
			c := startCluster(t, []devpanel.Server{transferServer(t, id)}, mutate)
			makeDeepTree(t, c.Source.dataDir(id), depth, "the bottom of the tree")
			c.Source.limitFDs(t, daemonFDLimit)

			c.startTransfer(id)
			// Both targets apply each entry relative to its parent, held
			// open (linear in the depth: ~5 s here for the classic 1,024
			// levels, ~15 s for the live 2,000, against 21 s and ~85 s when
			// each directory was opened from the root). The wait leaves
			// room for -race and a loaded machine, not for a hang: a stuck
			// transfer still fails here.
			wait.For(t, 2*time.Minute, func() bool { return len(c.reports(c.Target, id))+len(c.reports(c.Source, id)) > 0 },
				"a transfer outcome\nSOURCE:\n%s\nTARGET:\n%s", c.Source.log, c.Target.log)
			reports := append(c.reports(c.Source, id), c.reports(c.Target, id)...)
			t.Logf("reports: %v", reports)
			owner := c.Source
			if slices.Contains(reports, "success") {
				got, err := readDeep(t, c.Target.dataDir(id), depth)
				if err != nil || got != "the bottom of the tree" {
					t.Fatalf("the transfer was reported successful but the target lacks the bottom file: %q, %v", got, err)
				}
				owner = c.Target
			} else if !slices.Contains(reports, "failure") {
				t.Fatalf("reports %v: neither success nor failure", reports)
			} else {
				for _, l := range strings.Split(c.Source.log.String()+c.Target.log.String(), "\n") {
					if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
						t.Logf("%.300s", l)
					}
				}
			}
			owner.assertAnswersEveryFace(t, id)
		})
	}
}
