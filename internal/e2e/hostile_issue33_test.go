package e2e

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/tree"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// TestIssue33AttacksAtOnce mounts the attacks of issue 33 together against
// one daemon, the target of a two-node cluster (the transfer attacks need a
// target; the same daemon hosts the servers the backup attacks use), as a
// hostile owner and a compromised peer would, at the same time:
//
//   - item 1: a live stream of 100,000 manifest entries for unwritten
//     4 KiB paths, and one with version-4 records linking to ../;
//   - item 7: a classic form parking 2,000 tiny valid backups;
//   - item 2: 50 downloads of a repository backup, each read for 512 KiB
//     and then closed;
//   - item 3: downloads read for 64 KiB then held open up to the server's
//     cap (system.backups.downloads.max_per_server, 8 here), and one more
//     refused (429);
//   - item 4: a repository backup of a server holding 50,000 empty files;
//   - items 5 and 6: a repository backup of an 8 TiB sparse file and a
//     4 MiB file with 127 further names in a 32 MiB server;
//   - "Also": repository backups while the game swaps subdirectories for
//     links to a host directory (the readlink race);
//   - item 9, its first part: ten repository backups of a 15 MiB tree of
//     incompressible files, 3 of them rewritten between each;
//   - item 10, beside them: two more small daemons (in-memory runtime)
//     configured with one versitygw bucket and prefix; the second refuses
//     to back up into the first's repository, whose backups stay whole
//     (TestRepositoryTwoNodesOneBucketAttack's sequence). Their repository
//     is S3; the attacked daemon's stays local;
//   - then, once the rest is over, item 8: a copy of another server's file
//     costs the store what a fresh file does (per-server deduplication);
//   - and item 9's deletions: the first nine of its backups deleted, at
//     least half of what only they held is gone from the disk within 60 s.
//
// Afterwards the daemon answers on every face, its goroutines, descriptors
// and RSS come back within the bounds of docs/security.md ("All of issue
// 33's attacks at once"): +8 goroutines, +16 descriptors, +160 MiB of RSS
// over the level before the attacks.
func TestIssue33AttacksAtOnce(t *testing.T) {
	parallelDocker(t)
	const liveID = "7b000051-0000-4000-8000-000000000051"
	const parkID = "7a0000b5-0000-4000-8000-0000000000b5"
	emptyID, sparseID, swapID, attacker, gcID := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	live := transferServer(t, liveID)
	park := transferServer(t, parkID)
	park.Settings["build"].(map[string]any)["disk_space"] = 1
	port := freePort(t)
	c := startCluster(t, []devpanel.Server{live, park}, func(name string, cfg *config.Config) {
		cfg.System.Transfers.Live = true
		if name == "target" {
			cfg.System.Backups.Format = config.BackupFormatRepository
			// Room for item 2's downloads beside item 3's held ones.
			cfg.System.Backups.Downloads.MaxPerServer = 8
			cfg.Metrics = config.Metrics{BindAddress: fmt.Sprintf("127.0.0.1:%d", port), Token: downloadScrapeToken}
		}
	})
	// The backup servers live on the target.
	n := c.Target
	n.Panel = c.Panel // the backup reports reach the cluster's panel
	sparse := gameServer(sparseID)
	sparse.Settings["build"] = map[string]any{"memory_limit": 128, "swap": 0, "cpu_limit": 100, "disk_space": 32}
	for _, s := range []devpanel.Server{gameServer(backupServer), gameServer(emptyID), sparse, gameServer(swapID), gameServer(attacker), gameServer(gcID)} {
		c.Panel.PutServer(s)
		c.assign[n].set(s.UUID, true)
	}
	n.stop()
	n.restart()

	// What the games left in their directories beforehand.
	writeFiles(t, n.serverDir(backupServer), map[string]string{"world/a.bin": randomBytes(8 << 20), "world/b.bin": randomBytes(8 << 20),
		"config/secret.cfg": "rcon.password=" + randomBytes(24) + "\n" + randomBytes(2<<20)})
	repoMemEmptyFiles(t, n.serverDir(emptyID), 0, 50_000)
	writeSparseAndLinks(t, n.serverDir(sparseID))
	swapFiles := map[string]string{}
	for g := range 30 {
		for f := range 20 {
			swapFiles[fmt.Sprintf("g%02d/s0/f%02d", g, f)] = "mine"
		}
	}
	writeFiles(t, n.serverDir(swapID), swapFiles)
	gcTree := map[string]string{}
	for i := range gcFiles {
		gcTree[gcName(i)] = randomBytes(gcSize)
	}
	writeFiles(t, n.serverDir(gcID), gcTree)
	host := t.TempDir()
	writeFiles(t, host, map[string]string{"host-secret.txt": "host"})

	dl := newBackupID()
	if st := n.backupOf(backupServer, dl); !st.Successful {
		t.Fatalf("the download's backup failed\n%s", n.log)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if code := n.fullDownload(t, client, dl); code != 200 {
		t.Fatalf("full download: %d", code)
	}
	n.waitIdle(t, 60*time.Second)
	n.assertAnswersEveryFace(t, backupServer)
	// Item 10's bucket, started before the attacks (a skip or a fatal
	// error must come from the test's goroutine). Without versitygw, item
	// 10 is left out unless WHARF_REQUIRE_DOCKER=1 (CI), where it fails.
	var store *objectstore.Store
	if _, err := objectstore.Binary(); err == nil || os.Getenv("WHARF_REQUIRE_DOCKER") == "1" {
		store = objectstore.Start(t)
	} else {
		t.Logf("item 10 left out: %v", err)
	}

	base := n.level()
	packsBefore := repoUsage(t, n.repoDir())
	stopPeak := n.peakRSS()
	began := time.Now()

	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	var transferReports []string
	var transferMu sync.Mutex // the two transfer attacks share the target's report list per id

	// Item 1: the hostile live streams, one after the other (one id).
	wg.Go(func() {
		transferMu.Lock()
		defer transferMu.Unlock()
		for _, a := range []liveMemoryAttack{
			{name: "unwritten manifest", want: "the manifest names a path the stream did not write", minRecords: 1000,
				gen: func(raw []byte, i int) ([]byte, bool) {
					switch {
					case i == 0:
						return livePass(raw), true
					case i > 100_000:
						return raw, false
					}
					return liveManifestFile(raw, hostileFile(i-1)), true
				}},
			{name: "v4 link to ../", want: `etc/passwd`, minRecords: 3,
				gen: v4Records(func(raw []byte) []byte { return liveStr(liveStr(append(raw, 'H'), "b"), "../../../etc/passwd") })},
		} {
			r := c.liveMemoryAttack(t, liveID, a)
			transferReports = append(transferReports, "failure")
			if r.records < r.minRecords {
				fail("item 1 %s: the attack did not run (%d records)", a.name, r.records)
			}
			if r.status != 0 && r.status != http.StatusBadRequest {
				fail("item 1 %s: answer %d %q", a.name, r.status, r.msg)
			}
			if !strings.Contains(n.log.String(), a.want) {
				fail("item 1 %s: the target's log does not say %q", a.name, a.want)
			}
		}
	})
	// Item 7: parked backups.
	wg.Go(func() {
		tiny := tinyTarGz(t)
		arc := wingsArchive(t, map[string]string{"a.txt": "hello"})
		status, msg, sent := c.postParkingForm(t, parkID, arc, 2000, func(w io.Writer) error { _, err := w.Write(tiny); return err })
		if sent < 33*int64(len(tiny)) {
			fail("item 7: the attack did not run: %d bytes sent", sent)
		}
		if status != http.StatusBadRequest || !strings.Contains(msg, "more backups than this node accepts") {
			fail("item 7: answer %d %q", status, msg)
		}
	})
	// Item 2: interrupted downloads.
	var interrupted atomic.Int64
	wg.Go(func() {
		defer func() {
			if k := interrupted.Load(); k < 25 {
				fail("item 2: the attack did not run: %d of 50 downloads interrupted", k)
			}
		}()
		for i := range 50 {
			res, head := n.openDownload(t, client, dl, 512<<10)
			if res.StatusCode != 200 {
				// Item 3's held readers may take the server's slots a moment.
				if res.StatusCode == http.StatusTooManyRequests {
					continue
				}
				fail("item 2: download %d: %d %s", i, res.StatusCode, head)
				return
			}
			res.Body.Close()
			interrupted.Add(1)
		}
	})
	// Item 3: stalled readers up to the server's cap, then one refused.
	held := make(chan []*http.Response, 1)
	wg.Go(func() {
		var hs []*http.Response
		for len(hs) < 6 {
			res, _ := n.openDownload(t, client, dl, 64<<10)
			if res.StatusCode == http.StatusTooManyRequests {
				continue // item 2's downloads hold slots for a moment
			}
			if res.StatusCode != 200 {
				fail("item 3: a held download: %d", res.StatusCode)
				break
			}
			hs = append(hs, res)
		}
		held <- hs
	})
	// Item 4: many empty files.
	wg.Go(func() {
		if st := n.backupOf(emptyID, newBackupID()); !st.Successful {
			fail("item 4: the backup of 50,000 empty files failed")
		}
	})
	// Items 5 and 6: sparse file and hard links.
	sparseBackup := newBackupID()
	wg.Go(func() {
		if st := n.backupOf(sparseID, sparseBackup); !st.Successful {
			fail("items 5-6: the backup of the sparse file and the links failed")
		}
	})
	// Also: the readlink race.
	var swaps atomic.Int64
	wg.Go(func() {
		dir := n.serverDir(swapID)
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sub := filepath.Join(dir, fmt.Sprintf("g%02d", i%30), "s0")
				if os.Rename(sub, sub+".parked") == nil {
					swaps.Add(1)
					_ = os.Symlink(host, sub)
					// The link stays a moment so that the backup's walk can meet it: the
					// race is the point.
					time.Sleep(time.Millisecond)
					_ = os.Remove(sub)
					_ = os.Rename(sub+".parked", sub)
				}
			}
		}()
		defer func() { close(stop); <-done }()
		wait.For(t, 30*time.Second, func() bool { return swaps.Load() > 0 }, "the first swap")
		for range 3 {
			id := newBackupID()
			if st := n.backupOf(swapID, id); !st.Successful {
				fail("readlink race: a backup failed while the game swapped directories")
				return
			}
			if anyContains(n.downloadHeadersOf(t, swapID, id), "host-secret") {
				fail("readlink race: a backup holds the host's file")
				return
			}
		}
	})

	// Item 9, its first part: ten backups, 3 files rewritten between each.
	// The deletions come once the rest is over (item 8 measures the
	// store's growth; a GC beside it would blur that).
	gcIDs := make([]string, 0, 10)
	wg.Go(func() {
		for b := range 10 {
			if b > 0 {
				for j := range gcRewrites {
					// Spread over the tree (19 is prime to 60: 27 distinct
					// files, none rewritten twice), so the first backup's
					// pack stays more than half live (33 of 60 files): the
					// policy of main at 620f633 freed nothing of it.
					writeFiles(t, n.serverDir(gcID), map[string]string{gcName(((b-1)*gcRewrites + j) * 19 % gcFiles): randomBytes(gcSize)})
				}
			}
			id := newBackupID()
			if st := n.backupOf(gcID, id); !st.Successful {
				fail("item 9: backup %d of the GC's server failed", b)
				return
			}
			gcIDs = append(gcIDs, id)
		}
	})

	// Item 10: two more daemons on one bucket, beside the rest.
	if store != nil {
		wg.Go(func() {
			if err := twoNodesOneBucket(t, store); err != nil {
				fail("item 10: %v", err)
				return
			}
			t.Logf("item 10: the second node refused the first's repository; the first's backups stayed whole")
		})
	}

	// While they run: the daemon answers on every face.
	n.assertAnswersEveryFace(t, backupServer)
	wg.Wait()
	hs := <-held
	// The server's cap holds: two more held, then the ninth is refused.
	for range 2 {
		if res, _ := n.openDownload(t, client, dl, 64<<10); res.StatusCode == 200 {
			hs = append(hs, res)
		}
	}
	if res, body := n.openDownload(t, client, dl, 0); len(hs) != 8 || res.StatusCode != http.StatusTooManyRequests {
		fail("item 3: a download while %d are held (cap 8): %d %s", len(hs), res.StatusCode, body)
	}
	for _, r := range hs {
		r.Body.Close()
	}
	peak := stopPeak()
	t.Logf("the attacks ran %v; daemon RSS %d MiB before, peak %d MiB; %d downloads interrupted, %d directories swapped for links; load %s",
		time.Since(began).Round(100*time.Millisecond), base.rss>>10, peak>>10, interrupted.Load(), swaps.Load(), loadAvg())
	if peak > base.rss+256<<10 {
		fail("the daemon's RSS peaked at %d MiB under the attacks, %d MiB over its level (bound: +256 MiB)", peak>>10, (peak-base.rss)>>10)
	}
	for _, f := range failures {
		t.Error(f)
	}
	if t.Failed() {
		t.FailNow()
	}

	// Afterwards: what each attack must have left.
	c.waitReports(n, liveID, transferReports, 30*time.Second)
	c.waitReports(n, parkID, []string{"failure"}, 30*time.Second)
	n.assertGone(liveID)
	n.assertGone(parkID)
	entries, _ := os.ReadDir(n.Config.System.BackupDirectory)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tar.gz") || strings.HasPrefix(e.Name(), ".wharf-partial-transfer") {
			t.Errorf("item 7: the backup directory holds %s", e.Name())
		}
	}
	hdrs := n.downloadHeadersOf(t, sparseID, sparseBackup)
	if h := hdrs["big.img"]; h == nil || h.Size != sparseApparent || h.PAXRecords["GNU.sparse.major"] != "1" {
		t.Errorf("items 5-6: big.img in the download: %+v", h)
	}
	if h := hdrs["links/n127"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "links/n0" {
		t.Errorf("items 5-6: links/n127 in the download: %+v", h)
	}
	if packs := repoUsage(t, n.repoDir()); packs > 128<<20 {
		t.Errorf("the repository holds %d MiB of packs (the sparse file stored whole?)", packs>>20)
	}

	// Item 8, alone (it measures the store's growth): a copy of the
	// secret another server holds costs what a fresh file costs.
	secret, _ := os.ReadFile(filepath.Join(n.serverDir(backupServer), "config/secret.cfg"))
	writeFiles(t, n.serverDir(attacker), map[string]string{"guess.cfg": string(secret)})
	guess := grewBy(t, n.repoDir(), func() {
		if st := n.backupOf(attacker, newBackupID()); !st.Successful {
			t.Fatalf("item 8: the attacker's backup failed")
		}
	})
	if guess < int64(len(secret))*9/10 {
		t.Errorf("item 8: a copy of another server's %d-byte file grew the store by %d bytes (deduplicated across servers)", len(secret), guess)
	}

	// Item 9: the first nine of its backups deleted. What only they held:
	// the 27 first versions of the rewritten files (incompressible, each
	// rewritten once). The control: the store grew by at least the tree
	// and those versions while the backups ran (the other attacks only
	// add to that), and the tenth backup comes back whole afterwards.
	freeable := int64(9*gcRewrites) * gcSize
	before := repoUsage(t, n.repoDir())
	if len(gcIDs) != 10 || before-packsBefore < gcFiles*gcSize+freeable {
		t.Fatalf("item 9: control: %d backups, the store grew by %d bytes (want %d at least)", len(gcIDs), before-packsBefore, gcFiles*gcSize+freeable)
	}
	start := time.Now()
	for _, id := range gcIDs[:9] {
		if res, body := n.request("DELETE", "/api/servers/"+gcID+"/backup/"+id, nil, ""); res.StatusCode != 204 {
			t.Fatalf("item 9: delete: %d %s", res.StatusCode, body)
		}
	}
	var after int64
	freed := wait.Until(60*time.Second-time.Since(start), func() bool {
		after = repoUsage(t, n.repoDir())
		return before-after >= freeable/2
	})
	t.Logf("item 9: packs %.1f MiB before the deletions, %.1f MiB %v after they began (%.1f of %.1f MiB freeable freed)",
		inMiB(before), inMiB(after), time.Since(start).Round(100*time.Millisecond), inMiB(before-after), inMiB(freeable))
	if !freed {
		t.Errorf("item 9: within 60 s of the deletions %d of %d freeable bytes were freed; want half", before-after, freeable)
	}
	kept := n.downloadHeadersOf(t, gcID, gcIDs[9])
	for i := range gcFiles {
		if h := kept[gcName(i)]; h == nil || h.Size != gcSize {
			t.Errorf("item 9: %s in the backup kept: %+v", gcName(i), h)
			break
		}
	}

	// The daemon is back to its level and answers on every face.
	n.waitIdle(t, 60*time.Second)
	var now level
	// Up to 150 s: the Go runtime returns freed memory to the system after
	// its periodic collection (every 2 min when idle), so a run whose peak
	// left garbage comes back to the bound then; a leak never does.
	if !wait.Until(150*time.Second, func() bool {
		now = n.level()
		return now.goroutines <= base.goroutines+8 && now.fds <= base.fds+16 && now.rss <= base.rss+160<<10
	}) {
		t.Errorf("after the attacks: %d goroutines (were %d), %d descriptors (were %d), RSS %d MiB (was %d MiB)",
			now.goroutines, base.goroutines, now.fds, base.fds, now.rss>>10, base.rss>>10)
	}
	t.Logf("after: goroutines %d -> %d, descriptors %d -> %d, RSS %d -> %d MiB", base.goroutines, now.goroutines, base.fds, now.fds, base.rss>>10, now.rss>>10)
	n.assertAnswersEveryFace(t, backupServer)
	n.assertAnswersEveryFace(t, sparseID)
}

// Item 9's tree in the all-at-once test: 60 incompressible files of
// 256 KiB (15 MiB: one pack, whose 16 MiB buffer each running backup
// holds), 3 rewritten between two backups (5 %).
const (
	gcFiles    = 60
	gcSize     = 256 << 10
	gcRewrites = 3
)

func gcName(i int) string { return fmt.Sprintf("world/r.%03d.mca", i) }

// downloadHeadersOf is the headers of backup id of server srv's signed
// download, by name without a leading "./" (nil when the download fails).
func (n *node) downloadHeadersOf(t *testing.T, srv, id string) map[string]*tar.Header {
	t.Helper()
	tok := n.signURL(map[string]any{"server_uuid": srv, "backup_uuid": id, "unique_id": uuid.NewString()})
	res, body := n.get("/download/backup?token=" + tok)
	if res.StatusCode != 200 {
		t.Errorf("download of %s: %d", id, res.StatusCode)
		return nil
	}
	out := map[string]*tar.Header{}
	for name, h := range tree.Headers(t, bytes.NewReader(body)) {
		out[strings.TrimPrefix(name, "./")] = h
	}
	return out
}

func anyContains(names map[string]*tar.Header, s string) bool {
	for name := range names {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}
