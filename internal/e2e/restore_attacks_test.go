package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/devpanel"
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
