package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/testutil/tree"
)

// A game process swaps subdirectories of its server for links to a host
// directory, again and again, while repository backups walk the server: a
// tree large enough that the walk lists ahead on a second goroutine, and
// the swapped directories among those listed ahead with their parent
// (sandbox listKids). No backup may hold the host's file, every backup
// succeeds, and a backup made once the game stopped holds every file.
func TestRepositoryBackupWhileAGameSwapsSubdirectoriesForLinks(t *testing.T) {
	t.Parallel()
	n := repositoryNode(t, nodeOptions{fake: true})
	dir := n.serverDir(backupServer)
	files := map[string]string{}
	for g := range 60 {
		for s := range 2 {
			for f := range 20 {
				files[fmt.Sprintf("g%02d/s%d/f%02d", g, s, f)] = "mine"
			}
		}
	}
	writeFiles(t, dir, files)
	host := t.TempDir()
	writeFiles(t, host, map[string]string{"host-secret.txt": "host"})
	time.Sleep(300 * time.Millisecond) // the directories settle: listing ahead is used

	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			sub := filepath.Join(dir, fmt.Sprintf("g%02d", i%60), "s0")
			parked := sub + ".parked"
			select {
			case <-stop:
				return
			default:
			}
			if os.Rename(sub, parked) == nil {
				_ = os.Symlink(host, sub)
				// The attack's window: the link stays in place a moment for the walk to meet it.
				time.Sleep(time.Millisecond)
				_ = os.Remove(sub)
				_ = os.Rename(parked, sub)
			}
		}
	}()
	for range 6 {
		id := newBackupID()
		if st := n.backup(id, "local", ""); !st.Successful {
			close(stop)
			<-done
			t.Fatalf("a backup failed while the game swapped directories\n%s", n.log)
		}
		for name := range downloadNames(t, n, id) {
			if strings.Contains(name, "host-secret") {
				close(stop)
				<-done
				t.Fatalf("a backup holds the host's file: %s", name)
			}
		}
	}
	close(stop)
	<-done

	id := newBackupID()
	if st := n.backup(id, "local", ""); !st.Successful {
		t.Fatalf("the backup after the game stopped failed\n%s", n.log)
	}
	names := downloadNames(t, n, id)
	for name := range files {
		if !names[name] {
			t.Fatalf("the backup after the game stopped lacks %s", name)
		}
	}
}

// downloadNames is the names in backup id's signed download (tree.Headers),
// without a leading "./".
func downloadNames(t *testing.T, n *node, id string) map[string]bool {
	t.Helper()
	code, body := n.download(id)
	if code != 200 {
		t.Fatalf("download of %s: %d %s", id, code, body)
	}
	names := map[string]bool{}
	for name := range tree.Headers(t, bytes.NewReader(body)) {
		names[strings.TrimPrefix(name, "./")] = true
	}
	return names
}
