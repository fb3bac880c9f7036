package e2e

import (
	"github.com/wharf/wharf/internal/testutil/deeptree"
	"github.com/wharf/wharf/internal/testutil/wait"

	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/sys/unix"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
)

const (
	mib        = 1 << 20
	writeChunk = 32 << 10 // one SFTP write
	// diskSlack is how far past the limit what is on disk may go: one
	// write, and a few blocks of directories and entries.
	diskSlack = 2*writeChunk + 16<<10
)

// allocatedOnDisk is what a server really occupies: the allocated bytes of
// every entry under dir, plus the files under dir the daemon still holds
// open after they were removed (they have no name, but their blocks are
// used until the daemon closes them). deleted counts the latter.
func (n *node) allocatedOnDisk(t *testing.T, dir string) (total int64, deleted int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return nil
		}
		total += st.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fdDir := fmt.Sprintf("/proc/%d/fd", n.cmd.Process.Pid)
	es, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		target, _ := os.Readlink(filepath.Join(fdDir, e.Name()))
		if !strings.HasPrefix(target, dir+"/") || !strings.HasSuffix(target, " (deleted)") {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(fdDir, e.Name()), &st) == nil && st.Nlink == 0 {
			total += st.Blocks * 512
			deleted++
		}
	}
	return total, deleted
}

// writeAll writes chunk after chunk through f from its current offset
// until the server refuses one or most bytes are written; it returns how
// many were written.
func writeAll(f *sftp.File, most int) int {
	buf := bytes.Repeat([]byte{'w'}, writeChunk)
	n := 0
	for n < most {
		k, err := f.Write(buf[:min(writeChunk, most-n)])
		n += k
		if err != nil {
			return n
		}
	}
	return n
}

// limitedSFTPNode runs a node whose SFTP server has a 1 MiB disk limit.
func limitedSFTPNode(t *testing.T) (*node, *sftpSession, string) {
	t.Helper()
	n, c := ownerNode(t, nil, sftpServerDef(sftpSrvA, 1, nil))
	return n, c, n.serverDir(sftpSrvA)
}

// Disk limit bypass (a): 900 KiB written through a handle, the file
// truncated to 0 by another way (SFTP setstat, a second open with
// O_TRUNC, the file manager writing the file anew), then the first handle
// seeks back and writes again, five times over. Counted per handle, each
// round added the handle's old size for free; counted on disk, the server
// never holds more than its limit.
func TestDiskLimitTruncateUnderOpenHandle(t *testing.T) {
	t.Parallel()
	truncators := map[string]func(t *testing.T, n *node, c *sftpSession){
		"setstat": func(t *testing.T, n *node, c *sftpSession) {
			if err := c.Truncate("/a.bin", 0); err != nil {
				t.Fatalf("setstat size 0: %v", err)
			}
		},
		"open O_TRUNC": func(t *testing.T, n *node, c *sftpSession) {
			f, err := c.OpenFile("/a.bin", os.O_WRONLY|os.O_TRUNC)
			if err != nil {
				t.Fatalf("open O_TRUNC: %v", err)
			}
			_ = f.Close()
		},
		"file manager write": func(t *testing.T, n *node, c *sftpSession) {
			res, body := n.request("POST", "/api/servers/"+sftpSrvA+"/files/write?file=%2Fa.bin", "", "")
			if res.StatusCode != 204 {
				t.Fatalf("file manager write: %d %s", res.StatusCode, body)
			}
		},
	}
	for name, truncate := range truncators {
		t.Run(name, func(t *testing.T) {
			n, c, dir := limitedSFTPNode(t)
			f, err := c.OpenFile("/a.bin", os.O_RDWR|os.O_CREATE|os.O_TRUNC)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got := writeAll(f, 900<<10); got != 900<<10 {
				t.Fatalf("control: the first 900 KiB on a 1 MiB server: wrote %d", got)
			}
			total := 900 << 10
			for round := range 5 {
				truncate(t, n, c)
				if fi, err := c.Stat("/a.bin"); err != nil || fi.Size() != 0 {
					t.Fatalf("round %d, control: a.bin after the truncate: %v %v", round, fi, err)
				}
				if _, err := f.Seek(0, io.SeekStart); err != nil {
					t.Fatal(err)
				}
				total += writeAll(f, 3*mib)
				if got, _ := n.allocatedOnDisk(t, dir); got > mib+diskSlack {
					t.Fatalf("round %d: %d bytes allocated on a 1 MiB server (%d written in all)", round, got, total)
				}
			}
			if total < 2*mib {
				t.Fatalf("control: only %d bytes written in five rounds: the attack did not run", total)
			}
			_ = f.Close()
			if got, _ := n.allocatedOnDisk(t, dir); got > mib+diskSlack {
				t.Fatalf("after close: %d bytes allocated on a 1 MiB server", got)
			}
			n.assertAnswersEveryFace(t, sftpSrvA)
		})
	}
}

// Disk limit bypass (b): five files open through SFTP, 900 KiB written to
// each and each removed while its handle stays open, then every handle
// writes again. Their blocks stay on disk until the handles close, so they
// stay on the server's account until then.
func TestDiskLimitRemovedWhileOpen(t *testing.T) {
	t.Parallel()
	n, c, dir := limitedSFTPNode(t)
	var files []*sftp.File
	for i := range 5 {
		f, err := c.OpenFile("/f"+strconv.Itoa(i), os.O_RDWR|os.O_CREATE|os.O_TRUNC)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files = append(files, f)
	}
	total := 0
	for i, f := range files {
		got := writeAll(f, 900<<10)
		if i == 0 && got != 900<<10 {
			t.Fatalf("control: the first 900 KiB on a 1 MiB server: wrote %d", got)
		}
		total += got
		if err := c.Remove("/f" + strconv.Itoa(i)); err != nil {
			t.Fatalf("remove f%d: %v", i, err)
		}
	}
	for _, f := range files {
		total += writeAll(f, mib)
	}
	got, deleted := n.allocatedOnDisk(t, dir)
	if deleted != 5 {
		t.Fatalf("control: the daemon holds %d removed files open, want 5", deleted)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Fatalf("control: the removed files are still listed: %v", es)
	}
	if got > mib+diskSlack {
		t.Fatalf("%d bytes allocated on a 1 MiB server (%d written through removed files)", got, total)
	}
	for _, f := range files {
		_ = f.Close()
	}
	// Once closed, the space is free again.
	f, err := c.Create("/after.bin")
	if err != nil {
		t.Fatal(err)
	}
	if got := writeAll(f, 900<<10); got != 900<<10 {
		t.Fatalf("after closing the removed files, 900 KiB: wrote %d", got)
	}
	_ = f.Close()
	n.assertAnswersEveryFace(t, sftpSrvA)
}

// manyEmptyFiles is a tar.gz of count empty files.
func manyEmptyFiles(t *testing.T, count int) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	for i := range count {
		hdr := &tar.Header{Name: "many/" + strconv.Itoa(i), Mode: 0o644, Typeflag: tar.TypeReg, ModTime: time.Unix(1e9, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// countEntries counts what lies under dir.
func countEntries(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			n++
		}
		return nil
	})
	return n
}

// A tiny archive of 50,000 empty files on a 1 MiB server: every entry
// costs a block, so the extraction stops with the disk-limit error after
// at most 256 of them, and what it made is removed.
func TestDiskLimitDecompressManyEmptyFiles(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 1, nil)
	archive := manyEmptyFiles(t, 50_000)
	if len(archive) > 512<<10 {
		t.Fatalf("control: the archive is %d bytes, meant to be tiny", len(archive))
	}
	if err := os.WriteFile(n.fpath("many.tar.gz"), archive, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := n.dataDir(filesServer)
	ctx, cancel := context.WithCancel(context.Background())
	peak := make(chan int)
	go func() {
		most := 0
		for ctx.Err() == nil {
			most = max(most, countEntries(dir))
			// The observer's sampling period (it records the peak), not a wait for a condition.
			time.Sleep(5 * time.Millisecond)
		}
		peak <- most
	}()
	res, body := n.files("POST", "decompress", map[string]string{"root": "/", "file": "many.tar.gz"})
	cancel()
	most := <-peak
	wantError(t, "50,000 empty files", res, body, 400, "There is not enough disk space available to perform that action.")
	if left := countEntries(dir); left != 1 {
		t.Fatalf("%d entries left after the refused extraction, want only the archive", left)
	}
	if most > 1+1024/4+1 {
		t.Fatalf("the extraction made %d entries at once on a 1 MiB server", most)
	}
	// Control: the same archive extracts on an unlimited server.
	u := filesNode(t, 0, nil)
	if err := os.WriteFile(u.fpath("many.tar.gz"), archive, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := u.decompress("/", "many.tar.gz"); code != 204 {
		t.Fatalf("control: unlimited server: %d %s", code, body)
	}
	if got := countEntries(u.fpath("many")); got != 50_000 {
		t.Fatalf("control: unlimited server extracted %d files", got)
	}
	n.assertAnswersEveryFace(t, filesServer)
}

// A tree 2,500 levels deep with 5 MiB at the bottom, on a 1 MiB server,
// while the daemon has few descriptors to spare: the disk figure the panel
// reads counts the 5 MiB (a walk holding a descriptor per level would run
// out and leave the subtree out), or the server counts as over its limit.
func TestDiskUsageDeepTreeUnderDescriptorPressure(t *testing.T) {
	s := exampleServer(filesServer)
	s.Settings["build"] = map[string]any{"memory_limit": 128, "disk_space": 1}
	n := startNode(t, nodeOptions{fake: true,
		servers: []devpanel.Server{s},
		mutate:  func(c *config.Config) { c.System.DiskCheckInterval, c.System.DiskWalkInterval = 1, 1 },
	})
	if err := deeptree.ChainWithFile(n.dataDir(filesServer), 2500, 5*mib); err != nil {
		t.Fatal(err)
	}
	var old unix.Rlimit
	if err := unix.Prlimit(n.cmd.Process.Pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatal(err)
	}
	lim := unix.Rlimit{Cur: uint64(n.openFDs() + 64), Max: old.Max}
	if err := unix.Prlimit(n.cmd.Process.Pid, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	var disk float64
	wait.Until(20*time.Second, func() bool {
		disk = n.details(filesServer)["utilization"].(map[string]any)["disk_bytes"].(float64)
		return disk >= 5*mib
	})
	if disk < 5*mib {
		over := disk > mib
		res, body := n.files("POST", "write?file=%2Fprobe.txt", "x")
		if !over || res.StatusCode != 400 {
			t.Fatalf("disk figure %.0f bytes for a 5 MiB tree on a 1 MiB server, and a write answers %d %s", disk, res.StatusCode, body)
		}
	}
	n.assertAnswersEveryFace(t, filesServer)
}
