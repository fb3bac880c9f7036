package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// The job slot is the only door to a server's files (issue 23): a user's
// write holds it until it has answered, so a restore or a transfer asked
// for meanwhile either is refused with 409 naming the write, or waits for
// it; never does it run under the write (deleting its temporary file) or
// ship the half-written temporary file.

// slowSize is the size of a slow write: 3 MiB sent over about 4 seconds,
// longer than an exclusive job waits for the user jobs running (2 s).
const (
	slowSize  = 3 << 20
	slowChunk = 64 << 10
	slowPace  = 4 * time.Second / (slowSize / slowChunk)
)

// slowBody returns a reader of data that hands out a chunk per tick: a
// client on a slow link.
func slowBody(data []byte) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		tick := time.NewTicker(slowPace)
		defer tick.Stop()
		for rest := data; len(rest) > 0; {
			<-tick.C
			n := min(slowChunk, len(rest))
			if _, err := pw.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		_ = pw.Close()
	}()
	return pr
}

// slowResult is the answer to a slow write, and when it arrived.
type slowResult struct {
	status int
	body   []byte
	err    error
	at     time.Time
}

// slowWriter sends a slow write of data as name into the server's root, by
// one of the two doors users write through: the file manager
// (files/write) or a signed upload.
type slowWriter struct {
	name string
	// want is what a refused exclusive job is told.
	want string
	send func(n *node, server, name string, data []byte) (*http.Response, error)
}

var slowWriters = []slowWriter{
	{"filemanager", "being written by a user (file manager)", sendFileWrite},
	{"upload", "being written by a user (file upload)", sendUpload},
}

func sendFileWrite(n *node, server, name string, data []byte) (*http.Response, error) {
	req, err := http.NewRequest("POST", n.URL+"/api/servers/"+server+"/files/write?file="+name, slowBody(data))
	if err != nil {
		return nil, err
	}
	req.ContentLength = int64(len(data))
	req.Header.Set("Authorization", "Bearer "+n.Token)
	return http.DefaultClient.Do(req)
}

func sendUpload(n *node, server, name string, data []byte) (*http.Response, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		fw, err := mw.CreateFormFile("files", name)
		if err == nil {
			_, err = io.Copy(fw, slowBody(data))
		}
		if err == nil {
			err = mw.Close()
		}
		_ = pw.CloseWithError(err)
	}()
	claims := map[string]any{"server_uuid": server, "user_uuid": newBackupID(), "unique_id": newBackupID()}
	return http.Post(n.URL+"/upload/file?directory=/&token="+n.signURL(claims), mw.FormDataContentType(), pr)
}

// start sends the write in the background and waits until the daemon has
// begun writing it (its temporary file is there).
func (w slowWriter) start(t *testing.T, n *node, server, name string, data []byte) <-chan slowResult {
	t.Helper()
	done := make(chan slowResult, 1)
	go func() {
		res, err := w.send(n, server, name, data)
		r := slowResult{err: err}
		if err == nil {
			r.status = res.StatusCode
			r.body, _ = io.ReadAll(res.Body)
			res.Body.Close()
		}
		r.at = time.Now()
		done <- r
	}()
	dir := n.dataDir(server)
	wait.For(t, 30*time.Second, func() bool { return len(tempFiles(dir)) > 0 }, "the %s of %s to begin writing", w.name, name)
	return done
}

// tempFiles lists the temporary files of atomic writes under dir.
func tempFiles(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".wharf-tmp-") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// answered waits for the write's answer: 2xx, and the file in place.
func (w slowWriter) answered(t *testing.T, n *node, server string, done <-chan slowResult, name string, data []byte) slowResult {
	t.Helper()
	var r slowResult
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the %s never answered\n%s", w.name, n.log)
	}
	if r.err != nil || r.status/100 != 2 {
		t.Fatalf("the %s failed: %d %s %v", w.name, r.status, r.body, r.err)
	}
	got, err := os.ReadFile(filepath.Join(n.dataDir(server), name))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%s after the %s: %d bytes, %v; want %d bytes", name, w.name, len(got), err, len(data))
	}
	return r
}

// exclusiveOutcome checks the answer to an exclusive job asked for while
// the write ran: 409 naming the write, or accepted only once the write had
// answered. It reports whether the job was accepted.
func exclusiveOutcome(t *testing.T, job string, w slowWriter, res *http.Response, body []byte, answeredAt time.Time, done <-chan slowResult) bool {
	t.Helper()
	switch {
	case res.StatusCode == http.StatusConflict:
		var e struct{ Error string }
		if json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, w.want) {
			t.Fatalf("%s during a %s: 409 %s, want the error to name the %s (%q)", job, w.name, body, w.name, w.want)
		}
		return false
	case res.StatusCode/100 == 2:
		select {
		case r := <-done:
			if r.at.After(answeredAt) {
				t.Fatalf("%s accepted before the %s answered", job, w.name)
			}
		default:
			t.Fatalf("%s accepted (%d) while the %s still runs", job, res.StatusCode, w.name)
		}
		return true
	}
	t.Fatalf("%s during a %s: %d %s", job, w.name, res.StatusCode, body)
	return false
}

// A restore with truncate asked for during a slow write is refused naming
// the write (or waits for it); the write completes, and the restored tree
// is the backup's.
func TestOneDoorRestoreDuringAWrite(t *testing.T) {
	t.Parallel()
	for _, w := range slowWriters {
		t.Run(w.name, func(t *testing.T) {
			n := signedNode(t, nil)
			dir := n.dataDir(signedServer)
			writeFiles(t, dir, map[string]string{"server.properties": "motd=one door\n", "world/level.dat": "level"})
			b := n.localBackupOf(signedServer)
			want := snap(t, dir)

			data := make([]byte, slowSize)
			rand.Read(data)
			done := w.start(t, n, signedServer, "big.bin", data)
			restore := func() (*http.Response, []byte) {
				return n.request("POST", "/api/servers/"+signedServer+"/backup/"+b+"/restore",
					map[string]any{"adapter": "local", "truncate_directory": true}, "")
			}
			res, body := restore()
			at := time.Now()
			accepted := exclusiveOutcome(t, "a restore", w, res, body, at, done)
			if !accepted {
				w.answered(t, n, signedServer, done, "big.bin", data)
				if res, body := restore(); res.StatusCode != 202 {
					t.Fatalf("a restore once the %s answered: %d %s", w.name, res.StatusCode, body)
				}
			}
			if !n.waitRestoreStatus(b, 60*time.Second) {
				t.Fatalf("restore failed\n%s", n.log)
			}
			if diff := cmp.Diff(want, snap(t, dir)); diff != "" {
				t.Fatalf("the restored tree is not the backup (-backup +restored):\n%s", diff)
			}
		})
	}
}

// An outgoing transfer asked for during a slow write is refused naming
// the write (or waits for it); the write completes, and the target gets
// the written file, never a temporary one.
func TestOneDoorTransferDuringAWrite(t *testing.T) {
	for i, w := range slowWriters {
		t.Run(w.name, func(t *testing.T) {
			id := []string{"7a0000d1-0000-4000-8000-000000000001", "7a0000d2-0000-4000-8000-000000000002"}[i]
			c := startCluster(t, []devpanel.Server{transferServer(t, id)}, nil)
			writeFiles(t, c.Source.dataDir(id), map[string]string{"server.properties": "motd=one door\n"})
			data := make([]byte, slowSize)
			rand.Read(data)
			done := w.start(t, c.Source, id, "big.bin", data)
			transfer := func() (*http.Response, []byte) {
				return c.Source.request("POST", "/api/servers/"+id+"/transfer",
					map[string]any{"url": c.Target.URL + "/api/transfers", "token": "Bearer " + c.transferJWT(id)}, "")
			}
			res, body := transfer()
			accepted := exclusiveOutcome(t, "a transfer", w, res, body, time.Now(), done)
			if !accepted {
				w.answered(t, c.Source, id, done, "big.bin", data)
				if res, body := transfer(); res.StatusCode != 202 {
					t.Fatalf("a transfer once the %s answered: %d %s", w.name, res.StatusCode, body)
				}
			}
			c.waitReports(c.Target, id, []string{"success"}, 60*time.Second)
			if tmp := tempFiles(c.Target.dataDir(id)); len(tmp) != 0 {
				t.Fatalf("the transfer shipped temporary files: %v", tmp)
			}
			got, err := os.ReadFile(filepath.Join(c.Target.dataDir(id), "big.bin"))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("big.bin on the target: %d bytes, %v; want the %d written", len(got), err, len(data))
			}
			if diff := cmp.Diff(snap(t, c.Source.dataDir(id)), snap(t, c.Target.dataDir(id))); diff != "" {
				t.Fatalf("tree differs (-source +target):\n%s", diff)
			}
		})
	}
}

// A restore is no suspension: an SFTP login during a restore succeeds, a
// read works, and a write is refused until the restore ends.
func TestOneDoorSFTPLoginDuringARestore(t *testing.T) {
	t.Parallel()
	n := signedNode(t, func(c *config.Config) {
		c.System.Backups.WriteLimit = 5
		c.System.Backups.CompressionLevel = "none"
	})
	n.Panel.SetSFTPUsers(devpanel.SFTPUser{Username: "alice", Password: sftpPass, Server: signedServer, User: sftpOwner, Permissions: []string{"*"}})
	dir := n.dataDir(signedServer)
	big := make([]byte, 30<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(dir, "world.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	b := n.localBackupOf(signedServer)
	if res, body := n.request("POST", "/api/servers/"+signedServer+"/backup/"+b+"/restore", map[string]any{"adapter": "local"}, ""); res.StatusCode != 202 {
		t.Fatalf("restore: %d %s", res.StatusCode, body)
	}
	restoring := func() bool { return len(n.Panel.CallsTo("POST", "/backups/"+b+"/restore")) == 0 }

	s := n.sftpOpen(t, sftpLogin("alice", signedServer), ssh.Password(sftpPass))
	if _, err := s.ReadDir("/"); err != nil {
		t.Fatalf("a listing during the restore: %v", err)
	}
	f, err := s.Create("during.txt")
	if err == nil {
		_, err = f.Write([]byte("x"))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if !restoring() {
		t.Fatal("the restore ended before the SFTP checks: make it slower")
	}
	if err == nil {
		t.Fatal("an SFTP write during a restore succeeded")
	}
	if !n.waitRestoreStatus(b, 60*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
	putFile(t, s, "after.txt", []byte("after"))
}
