package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
)

// TestBackupHonoursEveryWingsIgnoreFile: a user's .pteroignore (Pterodactyl
// Wings, server/backup.go getServerwideIgnoredFiles) and .pelicanignore
// (Pelican Wings, same function) leave out what they leave out under those
// daemons, as the spec's .serviceignore does; present together, the union
// of their patterns applies.
func TestBackupHonoursEveryWingsIgnoreFile(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{gameServer(backupServer)}})
	dir := n.serverDir(backupServer)
	writeFiles(t, dir, map[string]string{
		"ptero/x.bin": "p", "pelican/x.bin": "q", "service/x.bin": "s", "world/level.dat": "lvl",
	})
	kept := func(id string) map[string]bool {
		t.Helper()
		names := archiveNames(t, filepath.Join(n.Config.System.BackupDirectory, id+".tar.gz"))
		out := map[string]bool{}
		for _, d := range []string{"ptero", "pelican", "service", "world"} {
			out[d] = names[d+"/"] != nil || names[d+"/x.bin"] != nil || names[d+"/level.dat"] != nil
		}
		return out
	}
	files := map[string]string{".pteroignore": "ptero/", ".pelicanignore": "pelican/", ".serviceignore": "service/"}
	for name, pattern := range files {
		writeFiles(t, dir, map[string]string{name: pattern + "\n"})
		id := newBackupID()
		if st := n.backup(id, "local", ""); !st.Successful {
			t.Fatalf("backup with %s failed", name)
		}
		got := kept(id)
		if got[pattern[:len(pattern)-1]] || !got["world"] {
			t.Fatalf("with %s alone (%q) the archive holds %v", name, pattern, got)
		}
		for other, op := range files {
			if other != name && !got[op[:len(op)-1]] {
				t.Fatalf("with %s alone, %s was left out: %v", name, op, got)
			}
		}
		os.Remove(filepath.Join(dir, name))
	}
	writeFiles(t, dir, map[string]string{".pteroignore": "ptero/", ".pelicanignore": "pelican/\n", ".serviceignore": "service/\n"})
	id := newBackupID()
	n.backup(id, "local", "")
	if got := kept(id); got["ptero"] || got["pelican"] || got["service"] || !got["world"] {
		t.Fatalf("with all three ignore files the archive holds %v", got)
	}
}

// wingsArchive is a backup as Pterodactyl or Pelican Wings writes it: a
// plain tar.gz of the server's files, without Wharf's integrity entry.
func wingsArchive(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, data := range files {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Now(), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(data)); err != nil {
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

func placeArchive(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// downloadBackup fetches a backup through a signed URL naming server.
func (n *node) downloadBackup(server, backup string) (int, []byte) {
	n.t.Helper()
	res, body := n.get("/download/backup?token=" + n.signURL(map[string]any{
		"server_uuid": server, "backup_uuid": backup, "unique_id": uuid.NewString(),
	}))
	return res.StatusCode, body
}

// restoreFrom restores a local backup of server and waits for its outcome.
func (n *node) restoreFrom(t *testing.T, server, backup string) bool {
	t.Helper()
	before := len(n.Panel.CallsTo("POST", "/backups/"+backup+"/restore"))
	res, body := n.request("POST", "/api/servers/"+server+"/backup/"+backup+"/restore", map[string]any{"adapter": "wings"}, "")
	if res.StatusCode != 202 {
		t.Fatalf("restore of %s on %s: %d %s", backup, server, res.StatusCode, body)
	}
	return waitCalls(t, n, "/backups/"+backup+"/restore", before+1)
}

// TestBackupLayoutsOfBothWingsCarryOver: a node switched from Pterodactyl
// Wings (flat: <dir>/<backup>.tar.gz, server/backup/backup_local.go) or
// Pelican Wings (per server: <dir>/<server>/<backup>.tar.gz, Backup.Path in
// server/backup/backup.go) restores, downloads and deletes the archives it
// finds, without a manual move; on a node that uses Pelican's layout new
// backups go there too, so Pelican Wings finds them if the node is switched
// back. Another server of the node cannot reach a per-server archive by its
// UUID (attacks.md F9).
func TestBackupLayoutsOfBothWingsCarryOver(t *testing.T) {
	t.Parallel()
	other := uuid.NewString()
	n := startNode(t, nodeOptions{fake: true, servers: []devpanel.Server{gameServer(backupServer), gameServer(other)}})
	dir := n.serverDir(backupServer)
	bdir := n.Config.System.BackupDirectory
	writeFiles(t, dir, map[string]string{"world/level.dat": "current"})

	cases := []struct {
		layout string
		path   func(backup string) string
	}{
		{"Pterodactyl Wings (flat)", func(b string) string { return filepath.Join(bdir, b+".tar.gz") }},
		{"Pelican Wings (per server)", func(b string) string { return filepath.Join(bdir, backupServer, b+".tar.gz") }},
	}
	for _, c := range cases {
		id := newBackupID()
		data := wingsArchive(t, map[string]string{"world/level.dat": "from " + c.layout})
		placeArchive(t, c.path(id), data)

		if c.layout != cases[0].layout {
			// The other server reaches nothing of it (a flat archive
			// without Wharf's owner record is reachable by UUID from every
			// server, as under Wings: docs/migrating-from-wings.md).
			if code, body := n.downloadBackup(other, id); code != 404 {
				t.Fatalf("%s: another server downloaded the archive: %d %.100s", c.layout, code, body)
			}
			res, body := n.request("POST", "/api/servers/"+other+"/backup/"+id+"/restore", map[string]any{"adapter": "local", "truncate_directory": true}, "")
			assertJSONError(t, res, body, 404)
			res, body = n.request("DELETE", "/api/servers/"+other+"/backup/"+id, nil, "")
			assertJSONError(t, res, body, 404)
			if _, err := os.Stat(c.path(id)); err != nil {
				t.Fatalf("%s: the archive is gone after another server's delete: %v", c.layout, err)
			}
		}

		code, body := n.downloadBackup(backupServer, id)
		if code != 200 || !bytes.Equal(body, data) {
			t.Fatalf("%s: download %d, %d bytes (want %d)", c.layout, code, len(body), len(data))
		}
		if !n.restoreFrom(t, backupServer, id) {
			t.Fatalf("%s: restore failed\n%s", c.layout, n.log)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "world/level.dat")); string(b) != "from "+c.layout {
			t.Fatalf("%s: restored level.dat = %q", c.layout, b)
		}
		if res, body := n.request("DELETE", "/api/servers/"+backupServer+"/backup/"+id, nil, ""); res.StatusCode != 204 {
			t.Fatalf("%s: delete %d %s", c.layout, res.StatusCode, body)
		}
		if _, err := os.Stat(c.path(id)); !os.IsNotExist(err) {
			t.Fatalf("%s: the archive is still there after delete", c.layout)
		}

		// New backups go where this node keeps its backups.
		fresh := newBackupID()
		st := n.backup(fresh, "local", "")
		got, err := os.ReadFile(c.path(fresh))
		if err != nil || !st.Successful {
			entries, _ := filepath.Glob(filepath.Join(bdir, "*"))
			t.Fatalf("%s: the new backup is not at %s (%v, status %+v); the directory holds %v", c.layout, c.path(fresh), err, st, entries)
		}
		if sum := fmt.Sprintf("%x", sha1.Sum(got)); sum != st.Checksum {
			t.Fatalf("%s: the panel was told sha1 %s, the archive has %s", c.layout, st.Checksum, sum)
		}
	}

	// A backup Wharf wrote in Pelican's layout: its own server restores and
	// downloads it; the other server can neither restore, download nor delete it.
	id := newBackupID()
	n.backup(id, "local", "")
	if _, err := os.Stat(filepath.Join(bdir, backupServer, id+".tar.gz")); err != nil {
		t.Fatal(err)
	}
	if code, _ := n.downloadBackup(other, id); code != 404 {
		t.Fatalf("another server downloaded a per-server backup Wharf wrote: %d", code)
	}
	res, body := n.request("POST", "/api/servers/"+other+"/backup/"+id+"/restore", map[string]any{"adapter": "local"}, "")
	assertJSONError(t, res, body, 404)
	res, body = n.request("DELETE", "/api/servers/"+other+"/backup/"+id, nil, "")
	assertJSONError(t, res, body, 404)
	if code, _ := n.downloadBackup(backupServer, id); code != 200 {
		t.Fatalf("download of its own per-server backup: %d", code)
	}
	if !n.restoreFrom(t, backupServer, id) {
		t.Fatalf("restore of a per-server backup Wharf wrote failed\n%s", n.log)
	}
	if _, err := os.Stat(filepath.Join(n.serverDir(other), "world")); err == nil {
		t.Fatal("the other server's directory received the backup's files")
	}
	n.assertAnswersEveryFace(t, backupServer)
}

// TestBackupWritesInTheNodesLayout: new local backups go where the node's
// backups already are. A backup directory Pelican Wings filled (another
// server's <dir>/<server>/ directory) gets per-server archives; a Pelican
// node whose backups were all deleted (no directory left: Pelican Wings
// removes an emptied one) gets them with system.backups.layout: per_server.
func TestBackupWritesInTheNodesLayout(t *testing.T) {
	other := uuid.NewString()
	for _, tc := range []struct {
		name   string
		layout string
		setup  func(bdir string)
	}{
		{"auto on a directory Pelican Wings filled", "auto", func(bdir string) {
			placeArchive(t, filepath.Join(bdir, other, newBackupID()+".tar.gz"), wingsArchive(t, map[string]string{"a": "a"}))
		}},
		{"per_server on an empty directory", "per_server", func(string) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bdir string
			n := startNode(t, nodeOptions{
				servers: []devpanel.Server{gameServer(backupServer), gameServer(other)},
				mutate: func(c *config.Config) {
					c.System.Backups.Layout = tc.layout
					bdir = c.System.BackupDirectory
					tc.setup(bdir)
				},
			})
			writeFiles(t, n.serverDir(backupServer), map[string]string{"world/level.dat": "lvl"})
			id := newBackupID()
			if st := n.backup(id, "local", ""); !st.Successful {
				t.Fatal("backup failed")
			}
			want := filepath.Join(bdir, backupServer, id+".tar.gz")
			if fi, err := os.Stat(want); err != nil || !fi.Mode().IsRegular() {
				entries, _ := filepath.Glob(filepath.Join(bdir, "*"))
				t.Fatalf("the backup is not at %s: %v; the directory holds %v", want, err, entries)
			}
			if fi, err := os.Stat(filepath.Dir(want)); err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("the server's backup directory: %v %v", fi.Mode(), err)
			}
			if _, err := os.Stat(filepath.Join(bdir, id+".tar.gz")); !os.IsNotExist(err) {
				t.Fatal("the backup was also written flat")
			}
			if code, _ := n.downloadBackup(backupServer, id); code != 200 {
				t.Fatalf("download: %d", code)
			}
			if code, _ := n.downloadBackup(other, id); code != 404 {
				t.Fatalf("the other server's download: %d", code)
			}
		})
	}
}
