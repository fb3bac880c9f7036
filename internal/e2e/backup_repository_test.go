package e2e

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// repositoryNode starts a node with the backup server whose backups go to
// the repository; opts may set fake (the in-memory runtime: no Docker) for
// tests that start no container.
func repositoryNode(t *testing.T, opts ...nodeOptions) *node {
	var o nodeOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	o.servers = []devpanel.Server{gameServer(backupServer)}
	o.mutate = func(c *config.Config) { c.System.Backups.Format = config.BackupFormatRepository }
	return startNode(t, o)
}

func (n *node) repoDir() string { return filepath.Join(n.Config.System.BackupDirectory, ".repository") }

// repoUsage is the bytes of the repository's packs.
func repoUsage(t testing.TB, dir string) int64 {
	t.Helper()
	var total int64
	filepath.WalkDir(filepath.Join(dir, "packs"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	return total
}

func randomBytes(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return string(b)
}

func (n *node) restoreBackup(id string, truncate bool) int {
	n.t.Helper()
	res, _ := n.request("POST", "/api/servers/"+backupServer+"/backup/"+id+"/restore", map[string]any{"adapter": "local", "truncate_directory": truncate}, "")
	return res.StatusCode
}

func (n *node) download(id string) (int, []byte) {
	n.t.Helper()
	tok := n.signURL(map[string]any{"server_uuid": backupServer, "backup_uuid": id, "unique_id": uuid.NewString()})
	res, body := n.get("/download/backup?token=" + tok)
	return res.StatusCode, body
}

// withoutIntegrityEntry cuts the integrity entry (header and padded
// content) out of a backup-layout tar stream, failing when there is none.
func withoutIntegrityEntry(t *testing.T, tarData []byte) []byte {
	t.Helper()
	name := append([]byte(".backup.checksum"), 0)
	for off := len(tarData) - 512; off >= 0; off -= 512 {
		if !bytes.HasPrefix(tarData[off:], name) {
			continue
		}
		size, err := strconv.ParseInt(strings.Trim(string(tarData[off+124:off+136]), " \x00"), 8, 64)
		if err != nil {
			t.Fatalf("integrity entry size: %v", err)
		}
		end := off + 512 + int((size+511)/512*512)
		return append(tarData[:off:off], tarData[end:]...)
	}
	t.Fatal("no integrity entry in the download")
	return nil
}

// TestBackupRepositoryPanelFlows: with system.backups.format: repository the
// panel's create, restore (with and without truncate), signed download and
// delete work as with archives, the second backup stores only what changed,
// a delete frees its chunks and a damaged chunk fails a restore naming the
// file.
func TestBackupRepositoryPanelFlows(t *testing.T) {
	n := repositoryNode(t)
	dir := n.serverDir(backupServer)
	big := randomBytes(8 << 20)
	writeFiles(t, dir, map[string]string{"a.txt": "original a", "sub/b.txt": "original b", "world/region.bin": big, "other.bin": randomBytes(4 << 20)})
	if err := os.Symlink("sub/b.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "empty"), 0o755)
	old := time.Date(2019, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(filepath.Join(dir, "a.txt"), old, old)

	id1 := newBackupID()
	st1 := n.backup(id1, "local", "")
	if !st1.Successful || st1.ChecksumType != "sha1" || st1.Size < 12<<20 {
		t.Fatalf("status %+v\n%s", st1, n.log)
	}
	if _, err := os.Stat(filepath.Join(n.Config.System.BackupDirectory, id1+".tar.gz")); !os.IsNotExist(err) {
		t.Fatal("an archive was written with format repository")
	}
	u1 := repoUsage(t, n.repoDir())
	if u1 == 0 {
		t.Fatal("nothing in the repository")
	}

	// The download is a plain tar.gz that tar extracts; its tar stream is
	// what the size and checksum describe.
	code, body := n.download(id1)
	if code != 200 {
		t.Fatalf("download: %d %s", code, body)
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	// The repository stores the stream bare; the download has the
	// integrity entry too, as an archive backup's, and without it is the
	// stored stream.
	plain = withoutIntegrityEntry(t, plain)
	if int64(len(plain)) != st1.Size {
		t.Fatalf("download: tar of %d bytes without the integrity entry; panel told %d", len(plain), st1.Size)
	}
	// The checksum is the SHA-1 of the manifest's "<sha256> <len>" lines
	// (docs/backup-repository.md), and those chunks are the download's tar.
	mb, err := os.ReadFile(filepath.Join(n.repoDir(), "snapshots", backupServer, id1+".json"))
	if err != nil {
		t.Fatal(err)
	}
	man, err := chunkstore.ParseManifest(mb)
	if err != nil {
		t.Fatal(err)
	}
	lines, rest := sha1.New(), plain
	for _, c := range man.Chunks {
		if c.Len > int64(len(rest)) || fmt.Sprintf("%x", sha256.Sum256(rest[:c.Len])) != c.Hash {
			t.Fatalf("download: does not match the manifest's chunk %s", c.Hash)
		}
		rest = rest[c.Len:]
		fmt.Fprintf(lines, "%s %d\n", c.Hash, c.Len)
	}
	if sum := fmt.Sprintf("%x", lines.Sum(nil)); len(rest) != 0 || sum != st1.Checksum {
		t.Fatalf("download: %d bytes past the chunks; chunk list sha1 %s, panel told %s", len(rest), sum, st1.Checksum)
	}
	out := t.TempDir()
	archive := filepath.Join(t.TempDir(), id1+".tar.gz")
	os.WriteFile(archive, body, 0o600)
	if b, err := exec.Command("tar", "xzf", archive, "-C", out).CombinedOutput(); err != nil {
		t.Fatalf("tar xzf: %v %s", err, b)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "world/region.bin")); string(b) != big {
		t.Fatal("tar extracted a different world/region.bin")
	}

	// Second backup after a small change: a small store growth.
	writeFiles(t, dir, map[string]string{"a.txt": "second a"})
	id2 := newBackupID()
	if st := n.backup(id2, "local", ""); !st.Successful {
		t.Fatal("second backup failed")
	}
	if grow := repoUsage(t, n.repoDir()) - u1; grow > u1/20 {
		t.Fatalf("second backup grew the repository by %d of %d bytes", grow, u1)
	}

	// Restore without truncate: changed files come back, new files stay.
	writeFiles(t, dir, map[string]string{"a.txt": "changed", "new.txt": "new"})
	if code := n.restoreBackup(id1, false); code != 202 {
		t.Fatalf("restore: %d", code)
	}
	if !n.waitRestoreStatus(id1, 60*time.Second) {
		t.Fatalf("restore failed\n%s", n.log)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "original a" {
		t.Fatalf("a.txt = %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "a.txt")); !fi.ModTime().Equal(old) {
		t.Fatalf("mtime %v", fi.ModTime())
	}
	if l, _ := os.Readlink(filepath.Join(dir, "link")); l != "sub/b.txt" {
		t.Fatalf("link = %q", l)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.txt")); err != nil {
		t.Fatal("restore without truncate removed a file")
	}
	// With truncate: only the backup's files.
	waitFor := len(n.Panel.CallsTo("POST", "/backups/"+id2+"/restore"))
	if code := n.restoreBackup(id2, true); code != 202 {
		t.Fatalf("restore: %d", code)
	}
	if !waitCalls(t, n, "/backups/"+id2+"/restore", waitFor+1) {
		t.Fatalf("truncating restore failed\n%s", n.log)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.txt")); !os.IsNotExist(err) {
		t.Fatal("truncate kept a file")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "second a" {
		t.Fatalf("a.txt = %q", b)
	}
	if fi, err := os.Stat(filepath.Join(dir, "empty")); err != nil || !fi.IsDir() {
		t.Fatal("empty directory not restored")
	}

	// Delete: 404 afterwards for restore, download and delete, and the
	// chunks only backup 1 used are freed within a minute.
	writeFiles(t, dir, map[string]string{"world/region.bin": randomBytes(8 << 20)})
	id3 := newBackupID()
	if st := n.backup(id3, "local", ""); !st.Successful {
		t.Fatal("third backup failed")
	}
	before := repoUsage(t, n.repoDir())
	for _, id := range []string{id1, id2} {
		if res, body := n.request("DELETE", "/api/servers/"+backupServer+"/backup/"+id, nil, ""); res.StatusCode != 204 {
			t.Fatalf("delete: %d %s", res.StatusCode, body)
		}
	}
	if code := n.restoreBackup(id1, false); code != 404 {
		t.Fatalf("restore of a deleted backup: %d", code)
	}
	if code, _ := n.download(id1); code != 404 {
		t.Fatalf("download of a deleted backup: %d", code)
	}
	if res, _ := n.request("DELETE", "/api/servers/"+backupServer+"/backup/"+id1, nil, ""); res.StatusCode != 404 {
		t.Fatalf("second delete: %d", res.StatusCode)
	}
	wait.For(t, time.Minute, func() bool { return repoUsage(t, n.repoDir()) < before-(6<<20) }, "the deleted backups' chunks to be freed")

	// A damaged chunk: the restore fails and names the file.
	damaged := damageLargestBlob(t, n.repoDir())
	if damaged == 0 {
		t.Fatal("no chunk to damage")
	}
	writeFiles(t, dir, map[string]string{"keep.txt": "keep"})
	waitFor = len(n.Panel.CallsTo("POST", "/backups/"+id3+"/restore"))
	if code := n.restoreBackup(id3, true); code != 202 {
		t.Fatalf("restore: %d", code)
	}
	if waitCalls(t, n, "/backups/"+id3+"/restore", waitFor+1) {
		t.Fatal("a damaged backup was reported restored")
	}
	if _, err := os.Stat(filepath.Join(dir, "keep.txt")); err != nil {
		t.Fatal("a damaged backup emptied the directory")
	}
	wait.For(t, 10*time.Second, func() bool { return strings.Contains(n.log.String(), "affected files: ") }, "the restore error naming the files\n%s", n.log)
	if !strings.Contains(n.log.String(), ".bin") {
		t.Fatalf("the restore error names no file:\n%s", n.log)
	}
	// Without truncate the damage is found while extracting: same error.
	waitFor = len(n.Panel.CallsTo("POST", "/backups/"+id3+"/restore"))
	if code := n.restoreBackup(id3, false); code != 202 {
		t.Fatalf("restore: %d", code)
	}
	if waitCalls(t, n, "/backups/"+id3+"/restore", waitFor+1) {
		t.Fatal("a damaged backup was reported restored")
	}
	wait.For(t, 10*time.Second, func() bool { return strings.Count(n.log.String(), "affected files: ") >= 2 }, "the second restore error naming the files\n%s", n.log)
}

// TestBackupRepositoryExportVerifyDiagnostics: `wharf backups export`
// writes a tar.gz that plain tar extracts, `wharf backups verify` names the
// files of a damaged chunk, and `wharf diagnostics` shows the format.
func TestBackupRepositoryExportVerifyDiagnostics(t *testing.T) {
	n := repositoryNode(t)
	dir := n.serverDir(backupServer)
	big := randomBytes(4 << 20)
	writeFiles(t, dir, map[string]string{"a.txt": "a", "world/region.bin": big})
	id := newBackupID()
	if st := n.backup(id, "local", ""); !st.Successful {
		t.Fatal("backup failed")
	}
	wharf := func(args ...string) (string, error) {
		b, err := exec.Command(wharfBinary, args...).CombinedOutput()
		return string(b), err
	}
	if out, err := wharf("diagnostics", "--config", n.CfgPath, "--log-lines", "0"); err != nil || !strings.Contains(out, "system.backups.format: repository") {
		t.Fatalf("diagnostics: %v\n%s", err, out)
	}
	to := t.TempDir()
	if out, err := wharf("backups", "export", "--config", n.CfgPath, "--to", to, id); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	out := t.TempDir()
	if b, err := exec.Command("tar", "xzf", filepath.Join(to, id+".tar.gz"), "-C", out).CombinedOutput(); err != nil {
		t.Fatalf("tar xzf: %v %s", err, b)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "world/region.bin")); string(b) != big {
		t.Fatal("the export holds a different world/region.bin")
	}
	if o, err := wharf("backups", "export", "--config", n.CfgPath, "--to", to, newBackupID()); err == nil {
		t.Fatalf("export of a missing backup succeeded:\n%s", o)
	}
	if o, err := wharf("backups", "verify", "--config", n.CfgPath); err != nil || !strings.Contains(o, "ok       "+id) {
		t.Fatalf("verify of a whole repository: %v\n%s", err, o)
	}
	// Damage the largest blob: the random file's content.
	if damageLargestBlob(t, n.repoDir()) == 0 {
		t.Fatal("no blob to damage")
	}
	o, err := wharf("backups", "verify", "--config", n.CfgPath)
	if err == nil || !strings.Contains(o, "DAMAGED  "+id) || !strings.Contains(o, "affected file: world/region.bin") {
		t.Fatalf("verify of a damaged chunk: %v\n%s", err, o)
	}
}

// TestBackupRepositoryKill9 kills the daemon during a backup, and during
// the garbage collection after a delete: the other backups restore whole,
// and a later backup of the same files does not trust a chunk that is not
// there.
func TestBackupRepositoryKill9(t *testing.T) {
	n := repositoryNode(t)
	dir := n.serverDir(backupServer)
	keep := randomBytes(8 << 20)
	writeFiles(t, dir, map[string]string{"keep.bin": keep})
	kept := newBackupID()
	if st := n.backup(kept, "local", ""); !st.Successful {
		t.Fatal("backup failed")
	}
	for i := range 6 {
		writeFiles(t, dir, map[string]string{fmt.Sprintf("data%d", i): randomBytes(16 << 20)})
	}
	// Kill -9 once the backup has written chunks.
	id := newBackupID()
	if res, _ := n.request("POST", "/api/servers/"+backupServer+"/backup", map[string]any{"adapter": "local", "uuid": id}, ""); res.StatusCode != 202 {
		t.Fatal("backup refused")
	}
	start := repoUsage(t, n.repoDir())
	wait.For(t, 20*time.Second, func() bool { return repoUsage(t, n.repoDir()) > start+(4<<20) }, "the backup to write chunks")
	if err := n.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-n.exited
	n.restart()
	if code := n.restoreBackup(id, false); code != 404 {
		t.Fatalf("the killed backup answers %d to a restore", code)
	}
	// The boot's GC removes the killed backup's chunks.
	wait.For(t, time.Minute, func() bool { return repoUsage(t, n.repoDir()) < start+(1<<20) }, "the killed backup's chunks to be collected")
	// A new backup of the same files is whole.
	id2 := newBackupID()
	if st := n.backup(id2, "local", ""); !st.Successful {
		t.Fatal("backup after the crash failed")
	}
	// Kill -9 during the GC of a delete, then everything left restores.
	if res, _ := n.request("DELETE", "/api/servers/"+backupServer+"/backup/"+id2, nil, ""); res.StatusCode != 204 {
		t.Fatal("delete refused")
	}
	if err := n.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-n.exited
	n.restart()
	os.Remove(filepath.Join(dir, "keep.bin"))
	if code := n.restoreBackup(kept, false); code != 202 {
		t.Fatalf("restore of the kept backup: %d", code)
	}
	if !n.waitRestoreStatus(kept, time.Minute) {
		t.Fatalf("the kept backup no longer restores\n%s", n.log)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "keep.bin")); string(b) != keep {
		t.Fatal("keep.bin restored wrong")
	}
	if o, err := exec.Command(wharfBinary, "backups", "verify", "--config", n.CfgPath).CombinedOutput(); err != nil {
		t.Fatalf("verify after the crashes: %v\n%s", err, o)
	}
}

// damageLargestBlob flips a byte in the middle of the largest blob of the
// repository's packs (a random file's content), found by reading the
// packs' trailers as docs/backup-repository.md describes them: entries of
// SHA-256 (32), offset, length, plain length (4 each, big-endian), then
// the entry count (4), the SHA-256 of the entries (32) and "WHPACK01".
// It returns the blob's length (0 when there is none).
func damageLargestBlob(t *testing.T, dir string) int {
	t.Helper()
	var victim string
	var at, size int64
	filepath.WalkDir(filepath.Join(dir, "packs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil || len(b) < 44 || string(b[len(b)-8:]) != "WHPACK01" {
			t.Fatalf("pack %s has no trailer", p)
		}
		count := int(binary.BigEndian.Uint32(b[len(b)-44:]))
		entries := b[len(b)-44-count*44 : len(b)-44]
		if fmt.Sprintf("%x", sha256.Sum256(entries)) != fmt.Sprintf("%x", b[len(b)-40:len(b)-8]) {
			t.Fatalf("pack %s: entries do not match the trailer", p)
		}
		for i := range count {
			e := entries[i*44:]
			off, n := int64(binary.BigEndian.Uint32(e[32:])), int64(binary.BigEndian.Uint32(e[36:]))
			if n > size {
				victim, at, size = p, off+n/2, n
			}
		}
		return nil
	})
	if victim == "" {
		return 0
	}
	f, err := os.OpenFile(victim, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, at)
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	return int(size)
}
