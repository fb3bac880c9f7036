package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/devpanel"
)

// TestHostileOwnerAllAttacksAtOnce mounts the hostile-owner attacks of the
// other *_attacks_test.go files together on one node, as one customer (or
// a few) would: a 7z bomb and an inode bomb through decompress, a disk
// limit walked around through SFTP truncation and unlinked open files, a
// denied file renamed out from under the denylist, FIFOs opened over SFTP,
// one session opening handles without end, a path of 4,000 components,
// three listings of a 100,000-entry directory, a compress of a 256 GiB
// sparse file whose client hangs up, and a thousand TCP connections that
// never log in. While they run and after, a neighbour's server must answer
// on every face; afterwards the attacked servers hold no more than their
// limit, the denied file was never served, the daemon's descriptors are
// back near where they were and it goes idle.
func TestHostileOwnerAllAttacksAtOnce(t *testing.T) {
	const (
		attacked = sftpSrvA    // 1 MiB, config/license.key denied
		inodes   = sftpSrvB    // 1 MiB: the archive bombs
		big      = filesServer // unlimited: the huge directory and the sparse file
		victim   = siblingServer
	)
	n := startSFTPNode(t, nil,
		sftpServerDef(attacked, 1, []string{licenseRel}),
		sftpServerDef(inodes, 1, nil),
		sftpServerDef(big, 0, nil),
		exampleServer(victim))
	var users []devpanel.SFTPUser
	for _, s := range []string{attacked, inodes, big, victim} {
		users = append(users, devpanel.SFTPUser{Username: "alice", Password: sftpPass, Server: s, User: sftpOwner, Permissions: []string{"*"}})
	}
	n.Panel.SetSFTPUsers(users...)

	// What the game processes left in their directories beforehand.
	adir, idir, bdir := n.serverDir(attacked), n.serverDir(inodes), n.serverDir(big)
	mustWrite(t, filepath.Join(adir, licenseRel), licenseData, 0o644)
	bomb, _ := hex.DecodeString(bomb7z)
	mustWrite(t, filepath.Join(idir, "bomb.7z"), string(bomb), 0o644)
	mustWrite(t, filepath.Join(idir, "many.tar.gz"), string(manyEmptyFiles(t, 50_000)), 0o644)
	mustWrite(t, filepath.Join(adir, "some.txt"), "some", 0o644)
	for _, name := range []string{"a.fifo", "b.fifo"} {
		if err := syscall.Mkfifo(filepath.Join(adir, name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const listed = 100_000
	if err := os.MkdirAll(filepath.Join(bdir, "huge"), 0o755); err != nil {
		t.Fatal(err)
	}
	makeEmptyFiles(t, filepath.Join(bdir, "huge"), listed)
	makeHugeSparse(t, filepath.Join(bdir, "huge.bin"))
	n.assertAnswersEveryFace(t, victim)
	fdsBefore := n.openFDs()

	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	call := func(ctx context.Context, method, server, route string, body any) (int, string) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(ctx, method, n.URL+"/api/servers/"+server+"/files/"+route, rd)
		req.Header.Set("Authorization", "Bearer "+n.Token)
		res, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	sftpLoginTo := func(server string) (*sftp.Client, func(), error) {
		c, err := n.sshDial(sftpLogin("alice", server), ssh.Password(sftpPass))
		if err != nil {
			return nil, nil, err
		}
		sc, err := sftp.NewClient(c)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return sc, func() { sc.Close(); c.Close() }, nil
	}

	var wg sync.WaitGroup
	attack := func(name string, fn func() error) {
		wg.Go(func() {
			if err := fn(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	ctx := context.Background()

	attack("decompress bombs", func() error {
		if st, body := call(ctx, "POST", inodes, "decompress", map[string]string{"root": "/", "file": "bomb.7z"}); st != 400 {
			return fmt.Errorf("7z bomb: %d %s", st, body)
		}
		if st, body := call(ctx, "POST", inodes, "decompress", map[string]string{"root": "/", "file": "many.tar.gz"}); st != 400 {
			return fmt.Errorf("50,000 empty files on 1 MiB: %d %s", st, body)
		}
		return nil
	})
	attack("disk limit through SFTP", func() error {
		c, done, err := sftpLoginTo(attacked)
		if err != nil {
			return err
		}
		defer done()
		f, err := c.Create("/a.bin")
		if err != nil {
			return err
		}
		defer f.Close()
		var open []*sftp.File
		defer func() {
			for _, o := range open {
				o.Close()
			}
		}()
		for round := range 5 {
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return err
			}
			writeAll(f, 900<<10)
			_ = c.Truncate("/a.bin", 0)
			o, err := c.Create(fmt.Sprintf("/gone-%d.bin", round))
			if err == nil {
				writeAll(o, 900<<10)
				_ = c.Remove(fmt.Sprintf("/gone-%d.bin", round))
				open = append(open, o)
			}
		}
		return nil
	})
	attack("denylist rename", func() error {
		st, body := call(ctx, "PUT", attacked, "rename", map[string]any{"root": "/", "files": []map[string]string{{"from": "config", "to": "moved"}}})
		if st != 403 {
			return fmt.Errorf("rename of the denied file's directory: %d %s", st, body)
		}
		if st, body := call(ctx, "GET", attacked, "contents?file="+q("moved/license.key"), nil); strings.Contains(body, licenseData) {
			return fmt.Errorf("the denied file was served: %d", st)
		}
		return nil
	})
	attack("FIFOs and handles over SFTP", func() error {
		c, done, err := sftpLoginTo(attacked)
		if err != nil {
			return err
		}
		defer done()
		for _, name := range []string{"/a.fifo", "/b.fifo"} {
			if _, ok := promptly(func() error {
				f, err := c.OpenFile(name, os.O_WRONLY)
				if err == nil {
					f.Close()
				}
				return err
			}); !ok {
				return fmt.Errorf("opening %s blocked", name)
			}
		}
		held := 0
		var refusal error
		for held < 1000 {
			f, err := c.Open("/some.txt")
			if err != nil {
				refusal = err
				break
			}
			defer f.Close()
			held++
		}
		if refusal == nil || !strings.Contains(strings.ToLower(refusal.Error()), "too many open files") {
			return fmt.Errorf("%d handles opened in one session, then %v", held, refusal)
		}
		return nil
	})
	attack("a path of 4,000 components", func() error {
		if st, body := call(ctx, "POST", big, "create-directory", map[string]string{"name": deepPath(4000, "x"), "path": "/"}); st != 400 {
			return fmt.Errorf("%d %s", st, body)
		}
		return nil
	})
	for i := range 3 {
		attack(fmt.Sprintf("listing %d", i), func() error { return n.listHuge("huge", listed) })
	}
	attack("compress of a 256 GiB sparse file, client gone", func() error {
		cctx, hangUp := context.WithTimeout(ctx, 2*time.Second)
		defer hangUp()
		st, body := call(cctx, "POST", big, "compress", map[string]any{"root": "/", "files": []string{"huge.bin"}, "name": "big", "extension": "tar.gz"})
		if st != 0 {
			return fmt.Errorf("answered %d before the hang-up: %s", st, body)
		}
		return nil
	})
	var conns []*floodConn
	attack("unauthenticated flood", func() error {
		conns = floodNoFatal(n.sftpAddr(), "127.0.0.2", 1000)
		return nil
	})

	// While they run: the neighbour answers on every face.
	time.Sleep(time.Second) // let every attack get under way
	n.assertAnswersEveryFace(t, victim)
	wg.Wait()
	for _, fc := range conns {
		fc.c.Close()
	}

	// Afterwards.
	n.assertAnswersEveryFace(t, victim)
	n.assertAnswersEveryFace(t, attacked)
	n.waitCPUIdle(t, "the daemon goes idle once the attacks end")
	if total, _ := n.allocatedOnDisk(t, adir); total > mib+diskSlack {
		t.Errorf("the 1 MiB server holds %d bytes on disk", total)
	}
	if entries := countEntries(idir); entries > 10 {
		t.Errorf("the archive bombs left %d entries", entries)
	}
	if b, err := os.ReadFile(filepath.Join(adir, licenseRel)); err != nil || string(b) != licenseData {
		t.Errorf("the denied file moved or changed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(bdir, "big.tar.gz")); err == nil {
		t.Error("the abandoned compress left its archive")
	}
	noTemp(t, adir)
	noTemp(t, idir)
	waitUntil(t, 20*time.Second, "the daemon's descriptors come back near where they were", func() bool {
		return n.openFDs() <= fdsBefore+16
	})
}

// floodNoFatal is flood for a goroutine other than the test's: it opens up
// to count connections that never speak, and stops at the first error.
func floodNoFatal(addr, from string, count int) []*floodConn {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	var out []*floodConn
	for range count {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			break
		}
		out = append(out, &floodConn{c: c, greeted: make(chan struct{}), closed: make(chan struct{})})
	}
	return out
}
