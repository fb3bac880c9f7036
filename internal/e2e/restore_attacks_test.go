package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// A game process replaces a directory of its server by a link to outside
// after a backup; restoring that backup (without truncate) must put a real
// directory back and write nothing through the link. Extraction now creates
// entries relative to held directory handles (sandbox.DirStack): this is
// the attack that design must survive from the outside.
func TestRestoreDoesNotWriteThroughAParentSwappedForALink(t *testing.T) {
	n := startNode(t, nodeOptions{servers: []devpanel.Server{gameServer(backupServer)}})
	dir := n.serverDir(backupServer)
	writeFiles(t, dir, map[string]string{"sub/deeper/b.txt": "original b", "sub/c.txt": "original c"})
	id := newBackupID()
	if st := n.backup(id, "local", ""); !st.Successful {
		t.Fatal("backup failed")
	}

	outside := t.TempDir()
	if err := os.RemoveAll(filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}

	res, b := n.request("POST", "/api/servers/"+backupServer+"/backup/"+id+"/restore", map[string]any{"adapter": "local"}, "")
	if res.StatusCode != 202 {
		t.Fatalf("restore answered %d %s", res.StatusCode, b)
	}
	if !n.waitRestoreStatus(id, 60*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the restore wrote %d entries through the link, outside the server", len(ents))
	}
	if fi, err := os.Lstat(filepath.Join(dir, "sub")); err != nil || !fi.IsDir() {
		t.Fatalf("sub after the restore: %v %v; want a real directory", fi, err)
	}
	for name, want := range map[string]string{"sub/deeper/b.txt": "original b", "sub/c.txt": "original c"} {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != want {
			t.Fatalf("%s = %q, want %q", name, got, want)
		}
	}
}

// A server owner plants a file named like the integrity entry at the root
// of the server, with forged lines (a wrong sum for a real file, a name
// leading out). The repository stores streams bare, so the planted file is
// an ordinary file of the backup: a restore from the repository puts it
// back as it was and writes nothing else, and the signed download (sealed
// with the real entry) leaves it out, as an archive backup does, and
// extracts verified.
func TestRepositoryBackupWithAPlantedIntegrityEntry(t *testing.T) {
	t.Parallel()
	n := repositoryNode(t, nodeOptions{fake: true})
	dir := n.serverDir(backupServer)
	forged := "0000000000000000000000000000000000000000  a.txt\n" +
		"da39a3ee5e6b4b0d3255bfef95601890afd80709  ../../outside.txt\n"
	writeFiles(t, dir, map[string]string{"a.txt": "the real a", "sub/b.txt": "b", archive.ManifestName: forged})
	id := newBackupID()
	if st := n.backup(id, "local", ""); !st.Successful {
		t.Fatalf("backup failed\n%s", n.log)
	}

	code, body := n.download(id)
	if code != 200 {
		t.Fatalf("download: %d %s", code, body)
	}
	out := t.TempDir()
	res, err := archive.Extract(context.Background(), bytes.NewReader(body), tree.Open(t, out), archive.ExtractOptions{})
	if err != nil || !res.Verified {
		t.Fatalf("the download does not extract verified: %v (verified %v)", err, res.Verified)
	}
	if _, err := os.Lstat(filepath.Join(out, archive.ManifestName)); err == nil {
		t.Fatal("the download carried the planted file as a file")
	}
	if b, _ := os.ReadFile(filepath.Join(out, "a.txt")); string(b) != "the real a" {
		t.Fatalf("a.txt from the download = %q", b)
	}

	writeFiles(t, dir, map[string]string{"a.txt": "changed", archive.ManifestName: "changed too"})
	if code := n.restoreBackup(id, true); code != 202 {
		t.Fatalf("restore: %d", code)
	}
	if !n.waitRestoreStatus(id, 60*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
	for name, want := range map[string]string{"a.txt": "the real a", "sub/b.txt": "b", archive.ManifestName: forged} {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != want {
			t.Fatalf("%s after the restore = %q, want %q", name, got, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(filepath.Dir(dir)), "outside.txt")); err == nil {
		t.Fatal("the restore wrote outside the server")
	}
}

// A hostile tree through the repository format, end to end: a FIFO (a
// backup must not block on it), a chain of directories far deeper than the
// walk's held descriptors with a file at the bottom, and a link to outside
// the server. The backup succeeds; a truncating restore from the
// repository (its stream extracted as stored, without gzip or per-file
// hashes) puts back the deep file and the link as a link, makes no FIFO
// and writes nothing outside.
func TestRepositoryBackupAndRestoreOfAHostileTree(t *testing.T) {
	t.Parallel()
	n := repositoryNode(t, nodeOptions{fake: true})
	dir := n.serverDir(backupServer)
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	deep := dir
	for range 300 {
		deep = filepath.Join(deep, "d")
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, deep, map[string]string{"bottom.txt": "the bottom"})
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	id := newBackupID()
	if st := n.backup(id, "local", ""); !st.Successful {
		t.Fatalf("backup failed\n%s", n.log)
	}

	if err := os.RemoveAll(filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"new.txt": "made after the backup"})
	if code := n.restoreBackup(id, true); code != 202 {
		t.Fatalf("restore: %d", code)
	}
	if !n.waitRestoreStatus(id, 60*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
	if b, _ := os.ReadFile(filepath.Join(deep, "bottom.txt")); string(b) != "the bottom" {
		t.Fatalf("the deep file after the restore = %q", b)
	}
	if target, err := os.Readlink(filepath.Join(dir, "out")); err != nil || target != outside {
		t.Fatalf("the link after the restore: %q %v", target, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "pipe")); err == nil {
		t.Fatal("the restore made the FIFO")
	}
	if _, err := os.Lstat(filepath.Join(dir, "new.txt")); err == nil {
		t.Fatal("the truncating restore kept a file made after the backup")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the backup or restore wrote %d entries outside the server", len(ents))
	}
}

// A truncating restore from the repository keeps the files the backup
// writes again and rewrites them in place (archive.Prune): what a game
// leaves in their place between the backup and the restore must not
// survive it, block it or lead it outside. Two names of one file (a hard
// link made by the game), a link to a host file where a file goes, a FIFO
// where a file goes, a link to a host directory where a directory goes,
// and a tree 300 levels deep the backup lacks.
func TestTruncatingRepositoryRestoreOverWhatAGameLeft(t *testing.T) {
	t.Parallel()
	n := repositoryNode(t, nodeOptions{fake: true})
	dir := n.serverDir(backupServer)
	want := map[string]string{
		"a.txt": "A", "b.txt": "B", "config.yml": "motd: hi",
		"world/level.dat": "level", "plugins/p.jar": "jar",
	}
	writeFiles(t, dir, want)
	id := newBackupID()
	if st := n.backup(id, "local", ""); !st.Successful {
		t.Fatalf("backup failed\n%s", n.log)
	}

	outside := t.TempDir()
	hostFile := filepath.Join(outside, "host.txt")
	writeFiles(t, outside, map[string]string{"host.txt": "host"})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Remove(filepath.Join(dir, "a.txt")))
	must(os.Link(filepath.Join(dir, "b.txt"), filepath.Join(dir, "a.txt")))
	must(os.Remove(filepath.Join(dir, "config.yml")))
	must(os.Symlink(hostFile, filepath.Join(dir, "config.yml")))
	must(os.Remove(filepath.Join(dir, "world", "level.dat")))
	must(syscall.Mkfifo(filepath.Join(dir, "world", "level.dat"), 0o644))
	must(os.RemoveAll(filepath.Join(dir, "plugins")))
	must(os.Symlink(outside, filepath.Join(dir, "plugins")))
	deep := dir
	for range 300 {
		deep = filepath.Join(deep, "d")
	}
	must(os.MkdirAll(deep, 0o755))
	writeFiles(t, deep, map[string]string{"bottom.txt": "made after the backup"})

	if code := n.restoreBackup(id, true); code != 202 {
		t.Fatalf("restore: %d", code)
	}
	if !n.waitRestoreStatus(id, 60*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
	for name, body := range want {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%s after the restore: %v %v", name, fi, err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != body {
			t.Fatalf("%s after the restore = %q, want %q", name, b, body)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "d")); err == nil {
		t.Fatal("the truncating restore kept a tree made after the backup")
	}
	if b, _ := os.ReadFile(hostFile); string(b) != "host" {
		t.Fatalf("the host file = %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("the restore wrote into the host directory: %d entries", len(ents))
	}
}
