package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// bomb7z is the 45-byte 7z file of issue 21: a header that declares an
// absurd count, for which the 7z reader asks the Go runtime for hundreds of
// TiB. In the daemon's own process that is "fatal error: out of memory",
// which nothing can recover.
const bomb7z = "377abcaf271c00049b638bb600000000000000000d00000000000000dd28ba2a0105ff00000000000200000000"

// rootEntries lists the names at the top of the server root.
func rootEntries(t *testing.T, n *node) []string {
	t.Helper()
	entries, err := os.ReadDir(n.dataDir(filesServer))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// A 45-byte 7z bomb sent to files/decompress answers 400 with a JSON error
// saying the archive could not be read, leaves nothing in the server's
// directory (no staging or temporary entry, no file), and the daemon still
// answers on every face. Before decompression ran in an isolated child,
// this request killed the daemon.
func TestDecompressSevenZipBombLeavesTheDaemonAlive(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	bomb, err := hex.DecodeString(bomb7z)
	if err != nil || len(bomb) != 45 {
		t.Fatalf("bomb: %d bytes, %v", len(bomb), err)
	}
	mustWrite(t, n.fpath("bomb.7z"), string(bomb), 0o644)
	mustWrite(t, n.fpath("sub/bomb.7z"), string(bomb), 0o644)
	fdsBefore := n.openFDs()

	for _, c := range [][2]string{{"/", "bomb.7z"}, {"/sub", "bomb.7z"}} {
		res, body := n.files("POST", "decompress", map[string]string{"root": c[0], "file": c[1]})
		wantStatus(t, "7z bomb", res, body, 400)
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		// The control: the archive really made the decoder fail (its
		// memory limit, not some earlier refusal of the request).
		if !strings.HasPrefix(e.Error, "This archive could not be read: ") {
			t.Fatalf("7z bomb in %s: error %q", c[0], e.Error)
		}
	}
	if got := strings.Join(rootEntries(t, n), " "); got != "bomb.7z sub" {
		t.Fatalf("after the bomb the root holds %q, want only the archive and its directory", got)
	}
	if entries, _ := os.ReadDir(n.fpath("sub")); len(entries) != 1 {
		t.Fatalf("after the bomb sub/ holds %v", entries)
	}
	noTemp(t, n.dataDir(filesServer))
	n.assertAnswersEveryFace(t, filesServer)
	// The failed extractions hold no descriptor of the daemon (the
	// request's connection may still be counted: allow a few).
	if after := n.openFDs(); after > fdsBefore+4 {
		t.Fatalf("descriptors: %d before, %d after", fdsBefore, after)
	}
}

// The control for the isolation: good 7z, zip and tar.gz archives still
// extract through the child, with their bytes, modes and times, and the
// server's disk usage counts what the child wrote.
func TestDecompressThroughTheChildKeepsContentModesAndTimes(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	mtime := time.Date(2021, 2, 3, 4, 5, 6, 0, time.UTC)

	good7z, err := os.ReadFile(filepath.Join("testdata", "good.7z"))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, n.fpath("s/good.7z"), string(good7z), 0o644)
	if code, body := n.decompress("/s", "good.7z"); code != 204 {
		t.Fatalf("7z: %d %s", code, body)
	}
	// testdata/good.7z was made with 7-Zip from seven/a.txt (0640) and
	// seven/b/c.bin (0750, 20000 bytes of a formula), both with mtime
	// 2021-02-03T04:05:06Z.
	c := make([]byte, 20000)
	for i := range c {
		c[i] = byte((i*7 + i/251) % 256)
	}
	checkFile(t, n.fpath("s/seven/a.txt"), []byte("alpha seven\n"), 0o640, mtime)
	checkFile(t, n.fpath("s/seven/b/c.bin"), c, 0o750, mtime)

	big := bytes.Repeat([]byte("zip body "), 50000)
	mustWrite(t, n.fpath("z/a.zip"), string(makeZip(t, map[string]string{"d/big.txt": string(big), "one.txt": "one"})), 0o644)
	if code, body := n.decompress("/z", "a.zip"); code != 204 {
		t.Fatalf("zip: %d %s", code, body)
	}
	zipTime := time.Date(2022, 1, 2, 3, 4, 6, 0, time.UTC)
	checkFile(t, n.fpath("z/d/big.txt"), big, 0o640, zipTime)
	checkFile(t, n.fpath("z/one.txt"), []byte("one"), 0o640, zipTime)

	tgz := gzipBytes(makeTar(t, []tarEntry{
		{name: "pkg/", typ: tar.TypeDir, mode: 0o750},
		{name: "pkg/run.sh", body: "#!/bin/sh\n", mode: 0o755},
		{name: "pkg/conf/x.yml", body: "x: 1\n", mode: 0o600},
		{name: "pkg/link", typ: tar.TypeSymlink, link: "run.sh"},
		{name: "pkg/hard", typ: tar.TypeLink, link: "pkg/run.sh"},
	}))
	mustWrite(t, n.fpath("t/a.tar.gz"), string(tgz), 0o644)
	if code, body := n.decompress("/t", "a.tar.gz"); code != 204 {
		t.Fatalf("tar.gz: %d %s", code, body)
	}
	checkFile(t, n.fpath("t/pkg/run.sh"), []byte("#!/bin/sh\n"), 0o755, mtime)
	checkFile(t, n.fpath("t/pkg/conf/x.yml"), []byte("x: 1\n"), 0o600, mtime)
	checkFile(t, n.fpath("t/pkg/hard"), []byte("#!/bin/sh\n"), 0o755, mtime)
	if target, err := os.Readlink(n.fpath("t/pkg/link")); err != nil || target != "run.sh" {
		t.Fatalf("link: %q %v", target, err)
	}
	if fi, err := os.Stat(n.fpath("t/pkg")); err != nil || fi.Mode().Perm() != 0o750 || !fi.ModTime().Equal(mtime) {
		t.Fatalf("pkg/: %v", fi)
	}
	noTemp(t, n.dataDir(filesServer))

	// What the child wrote counts against the disk limit at once: 1 MiB of
	// it on a server whose limit leaves less is refused as out of space.
	n2 := filesNode(t, 1, nil)
	mustWrite(t, n2.fpath("first.zip"), string(makeZip(t, map[string]string{"f.bin": strings.Repeat("a", 700<<10)})), 0o644)
	mustWrite(t, n2.fpath("second.zip"), string(makeZip(t, map[string]string{"g.bin": strings.Repeat("b", 700<<10)})), 0o644)
	if code, body := n2.decompress("/", "first.zip"); code != 204 {
		t.Fatalf("first: %d %s", code, body)
	}
	res, body := n2.files("POST", "decompress", map[string]string{"root": "/", "file": "second.zip"})
	wantError(t, "second", res, body, 400, "There is not enough disk space available to perform that action.")
	if _, err := os.Lstat(n2.fpath("g.bin")); err == nil {
		t.Fatal("g.bin left behind")
	}
}

func checkFile(t *testing.T, p string, want []byte, mode os.FileMode, mtime time.Time) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the %d expected", p, len(got), len(want))
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != mode || !fi.ModTime().Equal(mtime) {
		t.Fatalf("%s: mode %v mtime %v, want %v %v", p, fi.Mode().Perm(), fi.ModTime(), mode, mtime)
	}
}

// With a system user other than root, the child runs as that user (what
// it extracts is owned by it, with no chown needed) and still reaches the
// server's root, although it may not walk the data directory's path.
func TestDecompressChildRunsAsTheServerUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the daemon must be root to change the child's user")
	}
	s := exampleServer(filesServer)
	s.Settings["build"] = map[string]any{"memory_limit": 128, "disk_space": 100}
	n := startNode(t, nodeOptions{fake: true,
		servers: []devpanel.Server{s},
		mutate:  func(c *config.Config) { c.System.Username = "nobody" },
	})
	// The data directory is the daemon's: the server's user may not enter it.
	if err := os.Chmod(n.Config.System.Data, 0o700); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, n.fpath("a.tar.gz"), string(gzipBytes(makeTar(t, []tarEntry{{name: "d/x.txt", body: "x"}}))), 0o644)
	if err := os.Chown(n.fpath("a.tar.gz"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if code, body := n.decompress("/", "a.tar.gz"); code != 204 {
		t.Fatalf("decompress: %d %s", code, body)
	}
	for _, p := range []string{"d", "d/x.txt"} {
		fi, err := os.Lstat(n.fpath(p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
			t.Fatalf("%s owned by %d:%d", p, st.Uid, st.Gid)
		}
	}

	// The child is not root: a directory of root's in the tree refuses it
	// (the daemon, root, could write there), with a 400 that says so, and
	// what the archive made before is removed.
	if err := os.Mkdir(n.fpath("rootonly"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, n.fpath("b.tar"), string(makeTar(t, []tarEntry{{name: "first.txt", body: "1"}, {name: "rootonly/x.txt", body: "x"}})), 0o644)
	res, body := n.files("POST", "decompress", map[string]string{"root": "/", "file": "b.tar"})
	wantError(t, "root's directory", res, body, 400, "Cannot extract the archive: /rootonly/x.txt is not writable by the server's user.")
	for _, p := range []string{"first.txt", "rootonly/x.txt"} {
		if _, err := os.Lstat(n.fpath(p)); err == nil {
			t.Fatalf("%s left behind", p)
		}
	}
}

// Decompressions of one server run together: four at once, each of an
// archive that alone fits the disk limit, together do not end past it.
func TestDecompressTogetherStaysWithinTheDiskLimit(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 2, nil)
	body := strings.Repeat("z", 700<<10)
	for i := range 4 {
		mustWrite(t, n.fpath(fmt.Sprintf("a%d.zip", i)), string(makeZip(t, map[string]string{fmt.Sprintf("f%d.bin", i): body})), 0o644)
	}
	codes := make(chan int, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			res, _ := n.files("POST", "decompress", map[string]string{"root": "/", "file": fmt.Sprintf("a%d.zip", i)})
			codes <- res.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	ok := 0
	for c := range codes {
		switch c {
		case 204:
			ok++
		case 400:
		default:
			t.Fatalf("status %d", c)
		}
	}
	var disk int64
	_ = filepath.Walk(n.dataDir(filesServer), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			disk += fi.Size()
		}
		return nil
	})
	if ok == 0 || disk > 2<<20 {
		t.Fatalf("%d of 4 extracted, %d bytes in the server for a limit of 2 MiB", ok, disk)
	}
	n.assertAnswersEveryFace(t, filesServer)
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
		if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
			out = append(out, child)
		}
	}
	return out
}

// A client that hangs up in the middle of a long decompression ends it:
// the daemon kills its child and removes what the child had extracted.
func TestDecompressEndsWhenTheClientHangsUp(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 0, nil)
	var entries []tarEntry
	zeros := strings.Repeat("\x00", 4<<20)
	for i := range 128 { // 512 MiB once extracted
		entries = append(entries, tarEntry{name: fmt.Sprintf("big/%03d.bin", i), body: zeros})
	}
	mustWrite(t, n.fpath("big.tar.gz"), string(gzipBytes(makeTar(t, entries))), 0o644)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body, _ := json.Marshal(map[string]string{"root": "/", "file": "big.tar.gz"})
	req, _ := http.NewRequestWithContext(ctx, "POST", n.URL+"/api/servers/"+filesServer+"/files/decompress", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+n.Token)
	done := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			err = fmt.Errorf("the decompression finished before the client hung up: %d", res.StatusCode)
		}
		done <- err
	}()
	// The control: the child is writing the archive's files.
	wait.For(t, 30*time.Second, func() bool {
		_, err := os.Stat(n.fpath("big/000.bin"))
		return err == nil
	}, "the decompression to write big/000.bin")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	pid := n.cmd.Process.Pid
	// Then: the child is gone, and what it extracted with it.
	wait.For(t, 30*time.Second, func() bool {
		_, err := os.Lstat(n.fpath("big"))
		return len(childrenOf(pid)) == 0 && errors.Is(err, os.ErrNotExist)
	}, "the decompression child and its partial tree to go")
	if got := strings.Join(rootEntries(t, n), " "); got != "big.tar.gz" {
		t.Fatalf("the root holds %q", got)
	}
	n.assertAnswersEveryFace(t, filesServer)
}
