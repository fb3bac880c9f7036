package e2e

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// A source whose backups are in the repository format sends a selected
// backup as the tar.gz its signed download serves, generated while it is
// sent: the target (archive format) has `<backup>.tar.gz`, the system tar
// extracts it to the tree at backup time, and a restore through the API
// puts the old content back.
func TestTransferCarriesRepositoryBackups(t *testing.T) {
	const id = "7a0000b3-0000-4000-8000-0000000000b3"
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, func(name string, cfg *config.Config) {
		if name == "source" {
			cfg.System.Backups.Format = config.BackupFormatRepository
		}
	})
	writeFiles(t, c.Source.dataDir(id), map[string]string{
		"world.dat": "the world as backed up", "sub/b.txt": "b", "sub/deep/region.bin": strings.Repeat("region ", 200_000),
	})
	if err := os.Symlink("sub/b.txt", filepath.Join(c.Source.dataDir(id), "link")); err != nil {
		t.Fatal(err)
	}
	backupID := newBackupID()
	c.backupOnSource(t, id, backupID)
	atBackup := relTree(t, c.Source.dataDir(id))
	if _, err := os.Stat(filepath.Join(c.Source.Config.System.BackupDirectory, backupID+".tar.gz")); err == nil {
		t.Fatal("the source made an archive backup: the test needs a repository one")
	}
	writeFiles(t, c.Source.dataDir(id), map[string]string{"world.dat": "the world after the backup", "new.txt": "new"})

	res, body := c.Source.request("POST", "/api/servers/"+id+"/transfer", map[string]any{
		"url": c.Target.URL + "/api/transfers", "token": "Bearer " + c.transferJWT(id), "backups": []string{backupID},
	}, "")
	if res.StatusCode != 202 {
		t.Fatalf("start transfer: %d %s", res.StatusCode, body)
	}
	c.waitReports(c.Target, id, []string{"success"}, 60*time.Second)
	c.Source.waitDaemonLog(`msg="a backup selected for the transfer is in the repository; sent as an archive generated from it" server=`+id+` direction=outgoing backup=`+backupID, 10*time.Second)
	c.Source.waitDaemonLog(`Streaming backup 1/1 to destination: `+backupID, 10*time.Second)

	// The carried backup is an archive the system tar extracts to the files
	// at backup time: as any backup archive, its links, empty directories
	// and integrity entry follow the end-of-archive marker where GNU tar
	// stops (archive.WriteOptions.TreeTrailer); the restore below checks
	// that they travelled too.
	carried := filepath.Join(c.Target.Config.System.BackupDirectory, backupID+".tar.gz")
	out := t.TempDir()
	if b, err := exec.Command("tar", "-xzf", carried, "-C", out).CombinedOutput(); err != nil {
		t.Fatalf("tar -xzf of the carried backup: %v %s", err, b)
	}
	extracted := relTree(t, out)
	delete(extracted, archive.ManifestName)
	wantFiles := maps.Clone(atBackup)
	delete(wantFiles, "link")
	if !maps.Equal(extracted, wantFiles) {
		t.Fatalf("the carried backup holds\n%v\nwant the files at backup time\n%v", extracted, wantFiles)
	}

	// It restores on the target through the API.
	if b, _ := os.ReadFile(filepath.Join(c.Target.dataDir(id), "world.dat")); string(b) != "the world after the backup" {
		t.Fatalf("world.dat on the target before the restore: %q", b)
	}
	res, body = c.Target.request("POST", "/api/servers/"+id+"/backup/"+backupID+"/restore", map[string]any{"adapter": "wings", "truncate_directory": true}, "")
	if res.StatusCode != 202 {
		t.Fatalf("restore on the target: %d %s", res.StatusCode, body)
	}
	if call, ok := c.Panel.WaitForCall("POST", "/backups/"+backupID+"/restore", 60*time.Second); !ok || !strings.Contains(string(call.Body), `"successful":true`) {
		t.Fatalf("the restore of the carried backup failed\n%s", c.Target.log)
	}
	if got := relTree(t, c.Target.dataDir(id)); !maps.Equal(got, atBackup) {
		t.Fatalf("the target after the restore holds\n%v\nwant\n%v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(atBackup)))
	}
}

// relTree maps each entry under root, by its path relative to root, to
// what it is: a directory, a link's target, or a file's mode and SHA-256.
func relTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			out[rel] = "dir"
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			out[rel] = "-> " + target
			return err
		default:
			b, err := os.ReadFile(p)
			out[rel] = fmt.Sprintf("%v %x", fi.Mode().Perm(), sha256.Sum256(b))
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A selected repository backup that is damaged fails the transfer, as an
// unreadable archive backup does: the source names the backup and the
// damage (and the file it is in) and keeps the server, the target keeps
// nothing of it.
func TestTransferFailsOnDamagedRepositoryBackup(t *testing.T) {
	const id = "7a0000b4-0000-4000-8000-0000000000b4"
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, func(name string, cfg *config.Config) {
		if name == "source" {
			cfg.System.Backups.Format = config.BackupFormatRepository
		}
	})
	writeFiles(t, c.Source.dataDir(id), map[string]string{"world.dat": "w", "region.bin": string(randomBytes(4 << 20))})
	backupID := newBackupID()
	c.backupOnSource(t, id, backupID)
	if damageLargestBlob(t, c.Source.repoDir()) == 0 {
		t.Fatal("no blob to damage")
	}
	res, body := c.Source.request("POST", "/api/servers/"+id+"/transfer", map[string]any{
		"url": c.Target.URL + "/api/transfers", "token": "Bearer " + c.transferJWT(id), "backups": []string{backupID},
	}, "")
	if res.StatusCode != 202 {
		t.Fatalf("start transfer: %d %s", res.StatusCode, body)
	}
	c.waitReports(c.Source, id, []string{"failure"}, 60*time.Second)
	c.waitReports(c.Target, id, []string{"failure"}, 60*time.Second)
	c.Source.waitDaemonLog(`msg="transfer failed" server=`+id+` direction=outgoing error=.*backup `+backupID+`: .*region.bin: chunk [0-9a-f]+ \(at byte [0-9]+ of the backup\) is damaged`, 10*time.Second)
	c.Target.assertGone(id)
	c.Source.assertUsable(id)
	// The target discards what it staged once the cut form ends.
	kept := func() []string {
		var names []string
		entries, _ := os.ReadDir(c.Target.Config.System.BackupDirectory)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), backupID) || strings.HasPrefix(e.Name(), ".wharf-partial-") {
				names = append(names, e.Name())
			}
		}
		return names
	}
	wait.For(t, 10*time.Second, func() bool { return len(kept()) == 0 }, "the target to discard what it staged of a damaged backup")
}
